/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stand-in for NVIDIA's NVML (libnvidia-ml.so.1) on machines without a GPU.
 *
 * It exports the functions pynvml (nvidia-ml-py 13.x) calls for what zerotrace reads, by
 * their real names and C signatures (nvml.h), with the real struct layouts, so pynvml
 * loads it through its normal search path (CDLL("libnvidia-ml.so.1"): LD_LIBRARY_PATH) and
 * cannot tell it from the driver's. Values come from a script, a text file named by
 * $ZT_NVML_SCRIPT, read at nvmlInit:
 *
 *   # comment
 *   driver 550.54.15            nvmlSystemGetDriverVersion
 *   device 0                    the lines below are GPU 0's, until the next `device`
 *   name NVIDIA H100 80GB HBM3  (rest of the line)
 *   uuid GPU-...
 *   utilization 37 12           nvmlDeviceGetUtilizationRates: gpu, memory (%)
 *   encoder 5 167000            nvmlDeviceGetEncoderUtilization: %, sampling period (us)
 *   decoder 0 167000
 *   memory T R F U              nvmlDeviceGetMemoryInfo(_v2): total reserved free used
 *   temperature 41              nvmlDeviceGetTemperature(V), the GPU sensor
 *   power_mw 123456             nvmlDeviceGetPowerUsage
 *   energy_mj 987654321         nvmlDeviceGetTotalEnergyConsumption
 *   clock_sm 1980               nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
 *   clock_mem 2619              (NVML_CLOCK_MEM)
 *   clocks_event_reasons 0x44   nvmlDeviceGetCurrentClocks{Event,Throttle}Reasons
 *   remapped_rows 1 0 0 0       nvmlDeviceGetRemappedRows: corr unc pending failure
 *   event_types 0x8             nvmlDeviceGetSupportedEventTypes
 *   field 82 45                 nvmlDeviceGetFieldValues: field id, value [, scope: N|all]
 *   process 4242 1073741824     nvmlDeviceGetComputeRunningProcesses_v3 (repeatable)
 *   process_util 4242 55 20 0 0 nvmlDeviceGetProcessUtilization: pid sm mem enc dec
 *   xid 79 300                  XID 79, delivered 300 ms after nvmlDeviceRegisterEvents
 *   mig_mode 0 0                nvmlDeviceGetMigMode: current, pending
 *   gpm 1                       nvmlGpmQueryDeviceSupport: isSupportedDevice (not scripted:
 *                               0, as a GPU before Hopper answers)
 *   gpm_metric 2 50.0           nvmlGpmMetricsGet: NVML_GPM_METRIC_* id, value in % (a
 *                               double) or !N for that metric's nvmlReturn (repeatable)
 *
 * A value `!N` makes the call (or that field value) return NVML error N (3: NOT_SUPPORTED);
 * a key not scripted for a device returns NOT_SUPPORTED, as a device without it does.
 * Each XID delivered is logged to $ZT_NVML_LOG (when set) as
 *   xid DEVICE XID due_ns REALTIME delivered_ns REALTIME
 * so a test knows exactly when the event was due; nvmlShutdown logs
 *   gpm_samples allocated N freed M
 *
 * GPM as NVML has it: nvmlGpmSampleGet fills a sample of one device, nvmlGpmMetricsGet gives
 * the scripted metrics between two samples of the same device, the earlier as sample1 (any
 * other use is INVALID_ARGUMENT, a version other than 1 ARGUMENT_VERSION_MISMATCH), so a
 * caller that measures over anything but two successive samples of the device fails here.
 * A sample freed after nvmlShutdown is UNINITIALIZED (and not counted freed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ZT_EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_TEMPERATURE_GPU 0
#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_VALUE_TYPE_UNSIGNED_LONG_LONG 3
#define NVML_FI_DEV_MEMORY_TEMP 82
#define NVML_MEMORY_V2 0x02000028u	/* sizeof(nvmlMemory_v2_t) | 2 << 24 */
#define NVML_TEMPERATURE_V1 0x0100000Cu /* sizeof(nvmlTemperature_v1_t) | 1 << 24 */
#define NVML_EVENT_XID 0x8ull		/* nvmlEventTypeXidCriticalError */
#define ALL_SCOPES 0xFFFFFFFFu
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_SUPPORT_VERSION 1
#define NVML_GPM_METRIC_MAX 477 /* nvml.h of nvidia-ml-py 13.x; only numMetrics are read */

#define MAX_DEVICES 8
#define MAX_ENTRIES 32
#define MAX_VALUES 5
#define MAX_FIELDS 32
#define MAX_PROCS 16
#define MAX_XIDS 8
#define MAX_GPM_METRICS 32
#define TEXT_LEN 96

/* ---- nvml.h types, by layout ---- */
typedef struct {
	unsigned int gpu;
	unsigned int memory;
} nvmlUtilization_t;

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
	unsigned int version;
	int sensorType;
	int temperature;
} nvmlTemperature_t;

typedef union {
	double dVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	signed long long sllVal;
	signed int siVal;
	unsigned short usVal;
} nvmlValue_t;

typedef struct {
	unsigned int fieldId;
	unsigned int scopeId;
	long long timestamp;
	long long latencyUsec;
	int valueType;
	nvmlReturn_t nvmlReturn;
	nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
	unsigned int pid;
	unsigned long long timeStamp;
	unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/* GPM (nvml.h): an opaque sample, and the structures pynvml builds by these layouts. */
struct gpm_sample {
	struct device *device; /* NULL until nvmlGpmSampleGet fills it */
	unsigned long long seq; /* which nvmlGpmSampleGet filled it, in call order */
};
typedef struct gpm_sample *nvmlGpmSample_t;

typedef struct {
	unsigned int metricId;
	nvmlReturn_t nvmlReturn;
	double value;
	struct {
		char *shortName;
		char *longName;
		char *unit;
	} metricInfo;
} nvmlGpmMetric_t;

typedef struct {
	unsigned int version;
	unsigned int numMetrics;
	nvmlGpmSample_t sample1;
	nvmlGpmSample_t sample2;
	nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
	unsigned int version;
	unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

/* The layouts pynvml's c_nvmlGpmMetric_t and c_nvmlGpmMetricsGet_t have on x86-64/aarch64. */
_Static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t layout");
_Static_assert(__builtin_offsetof(nvmlGpmMetricsGet_t, metrics) == 24, "nvmlGpmMetricsGet_t layout");

/* ---- the script, parsed ---- */
struct entry {
	char key[32];
	int err;
	int n;
	unsigned long long v[MAX_VALUES];
};

struct field {
	unsigned int id, scope;
	int err;
	unsigned long long v;
};

struct gpm_metric {
	unsigned int id;
	int err;
	double pct;
};

struct device {
	char name[TEXT_LEN], uuid[TEXT_LEN];
	struct gpm_metric gpm[MAX_GPM_METRICS];
	int n_gpm;
	struct entry entries[MAX_ENTRIES];
	int n_entries;
	struct field fields[MAX_FIELDS];
	int n_fields;
	nvmlProcessInfo_t procs[MAX_PROCS];
	int n_procs, procs_err;
	nvmlProcessUtilizationSample_t utils[MAX_PROCS];
	int n_utils, utils_err;
	unsigned long long xid[MAX_XIDS];
	unsigned int xid_after_ms[MAX_XIDS];
	int n_xids;
};

typedef struct device *nvmlDevice_t;

typedef struct {
	nvmlDevice_t device;
	unsigned long long eventType;
	unsigned long long eventData;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlEventData_t;

struct event_set {
	unsigned long long mask[MAX_DEVICES];
	long long reg_mono_ns[MAX_DEVICES], reg_real_ns[MAX_DEVICES];
	int delivered[MAX_DEVICES][MAX_XIDS];
};
typedef struct event_set *nvmlEventSet_t;

static struct device devices[MAX_DEVICES];
static int n_devices;
static char driver[TEXT_LEN];
static int initialized;
static unsigned long long gpm_seq, gpm_allocated, gpm_freed;

static long long now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* "!N" is an error code, anything else a number (0x... allowed). */
static int parse_value(const char *token, unsigned long long *value)
{
	if (token[0] == '!')
		return atoi(token + 1);
	*value = strtoull(token, NULL, 0);
	return 0;
}

/* Truncating copy: names longer than NVML's buffers are cut, as a script error would be. */
static void set_text(char *dst, size_t size, const char *src)
{
	size_t n = strlen(src);
	if (n >= size)
		n = size - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static const char *rest_of_line(char *line, const char *key)
{
	char *p = line + strlen(key);
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

static nvmlReturn_t script_error(int line_no, const char *why)
{
	fprintf(stderr, "nvml stand-in: script line %d: %s\n", line_no, why);
	return NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t parse_line(char *line, int line_no, struct device **dev, int *init_err)
{
	char copy[512], *save = NULL, *tok[8];
	int n = 0;
	char *hash = strchr(line, '#');
	if (hash)
		*hash = '\0';
	line[strcspn(line, "\r\n")] = '\0';
	set_text(copy, sizeof(copy), line);
	for (char *t = strtok_r(copy, " \t", &save); t && n < 8; t = strtok_r(NULL, " \t", &save))
		tok[n++] = t;
	if (n == 0)
		return NVML_SUCCESS;
	if (!strcmp(tok[0], "init")) {
		unsigned long long ignored;
		*init_err = n > 1 ? parse_value(tok[1], &ignored) : 0;
		return NVML_SUCCESS;
	}
	if (!strcmp(tok[0], "driver")) {
		set_text(driver, sizeof(driver), rest_of_line(line, "driver"));
		return NVML_SUCCESS;
	}
	if (!strcmp(tok[0], "device")) {
		int index = n > 1 ? atoi(tok[1]) : -1;
		if (index < 0 || index >= MAX_DEVICES)
			return script_error(line_no, "device index out of range");
		*dev = &devices[index];
		if (index + 1 > n_devices)
			n_devices = index + 1;
		return NVML_SUCCESS;
	}
	if (!*dev)
		return script_error(line_no, "a device line must come first");
	struct device *d = *dev;
	if (!strcmp(tok[0], "name")) {
		set_text(d->name, sizeof(d->name), rest_of_line(line, "name"));
	} else if (!strcmp(tok[0], "uuid") && n > 1) {
		set_text(d->uuid, sizeof(d->uuid), tok[1]);
	} else if (!strcmp(tok[0], "field") && n > 2 && d->n_fields < MAX_FIELDS) {
		struct field *f = &d->fields[d->n_fields++];
		f->id = (unsigned int)strtoul(tok[1], NULL, 0);
		f->err = parse_value(tok[2], &f->v);
		f->scope = n > 3 ? (!strcmp(tok[3], "all") ? ALL_SCOPES : (unsigned)atoi(tok[3])) : 0;
	} else if (!strcmp(tok[0], "process") && n > 1) {
		unsigned long long v = 0;
		if (tok[1][0] == '!') {
			d->procs_err = parse_value(tok[1], &v);
		} else if (n > 2 && d->n_procs < MAX_PROCS) {
			nvmlProcessInfo_t *p = &d->procs[d->n_procs++];
			p->pid = (unsigned int)strtoul(tok[1], NULL, 0);
			parse_value(tok[2], &p->usedGpuMemory);
			p->gpuInstanceId = p->computeInstanceId = 0xFFFFFFFFu; /* not MIG */
		}
	} else if (!strcmp(tok[0], "process_util") && n > 1) {
		unsigned long long v[5] = {0};
		if (tok[1][0] == '!') {
			d->utils_err = parse_value(tok[1], &v[0]);
		} else if (n > 5 && d->n_utils < MAX_PROCS) {
			nvmlProcessUtilizationSample_t *u = &d->utils[d->n_utils++];
			for (int i = 0; i < 5; i++)
				v[i] = strtoull(tok[i + 1], NULL, 0);
			u->pid = (unsigned int)v[0];
			u->smUtil = (unsigned int)v[1];
			u->memUtil = (unsigned int)v[2];
			u->encUtil = (unsigned int)v[3];
			u->decUtil = (unsigned int)v[4];
		}
	} else if (!strcmp(tok[0], "gpm_metric") && n > 2 && d->n_gpm < MAX_GPM_METRICS) {
		struct gpm_metric *m = &d->gpm[d->n_gpm++];
		m->id = (unsigned int)strtoul(tok[1], NULL, 0);
		m->err = tok[2][0] == '!' ? atoi(tok[2] + 1) : 0;
		m->pct = m->err ? 0.0 : strtod(tok[2], NULL);
	} else if (!strcmp(tok[0], "xid") && n > 2 && d->n_xids < MAX_XIDS) {
		d->xid[d->n_xids] = strtoull(tok[1], NULL, 0);
		d->xid_after_ms[d->n_xids++] = (unsigned int)strtoul(tok[2], NULL, 0);
	} else if (d->n_entries < MAX_ENTRIES) {
		struct entry *e = &d->entries[d->n_entries++];
		set_text(e->key, sizeof(e->key), tok[0]);
		for (int i = 1; i < n && e->n < MAX_VALUES; i++) {
			e->err = parse_value(tok[i], &e->v[e->n]);
			if (e->err)
				break;
			e->n++;
		}
	} else {
		return script_error(line_no, "too many lines for one device");
	}
	return NVML_SUCCESS;
}

static nvmlReturn_t load(void)
{
	const char *path = getenv("ZT_NVML_SCRIPT");
	char line[512];
	struct device *dev = NULL;
	int line_no = 0, init_err = 0;
	nvmlReturn_t ret = NVML_SUCCESS;
	FILE *f;

	if (!path || !(f = fopen(path, "r")))
		return NVML_ERROR_DRIVER_NOT_LOADED; /* no script: as no driver */
	memset(devices, 0, sizeof(devices));
	n_devices = 0;
	gpm_seq = gpm_allocated = gpm_freed = 0;
	driver[0] = '\0';
	while (ret == NVML_SUCCESS && fgets(line, sizeof(line), f))
		ret = parse_line(line, ++line_no, &dev, &init_err);
	fclose(f);
	if (ret != NVML_SUCCESS)
		return ret;
	if (init_err)
		return init_err;
	initialized = 1;
	return NVML_SUCCESS;
}

static int valid(nvmlDevice_t d)
{
	return initialized && d >= devices && d < devices + n_devices;
}

/* The scripted values of `key` on `d`, at least `need` of them. */
static nvmlReturn_t get(nvmlDevice_t d, const char *key, int need, unsigned long long **out)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!valid(d))
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < d->n_entries; i++) {
		struct entry *e = &d->entries[i];
		if (strcmp(e->key, key))
			continue;
		if (e->err)
			return e->err;
		if (e->n < need) {
			fprintf(stderr, "nvml stand-in: %s needs %d values\n", key, need);
			return NVML_ERROR_UNKNOWN;
		}
		*out = e->v;
		return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t copy_text(const char *text, char *buf, unsigned int length)
{
	if (!buf)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(text) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, text, strlen(text) + 1);
	return NVML_SUCCESS;
}

/* ---- initialisation and the system ---- */
ZT_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	(void)flags;
	return load();
}

ZT_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	return load();
}

static void log_line(const char *line)
{
	const char *path = getenv("ZT_NVML_LOG");
	FILE *f;
	if (!path || !(f = fopen(path, "a")))
		return;
	fputs(line, f);
	fclose(f);
}

ZT_EXPORT nvmlReturn_t nvmlShutdown(void)
{
	char line[96];
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	initialized = 0;
	snprintf(line, sizeof(line), "gpm_samples allocated %llu freed %llu\n", gpm_allocated,
		 gpm_freed);
	log_line(line);
	return NVML_SUCCESS;
}

ZT_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case 4:
		return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT:
		return "Timeout";
	case 15:
		return "GPU is lost";
	default:
		return "Unknown Error";
	}
}

ZT_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!driver[0])
		return NVML_ERROR_NOT_SUPPORTED;
	return copy_text(driver, version, length);
}

/* ---- devices ---- */
ZT_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	*count = (unsigned int)n_devices;
	return NVML_SUCCESS;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (index >= (unsigned int)n_devices || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	if (!valid(device))
		return NVML_ERROR_INVALID_ARGUMENT;
	return copy_text(device->name, name, length);
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	if (!valid(device))
		return NVML_ERROR_INVALID_ARGUMENT;
	return copy_text(device->uuid, uuid, length);
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(device, "utilization", 2, &v);
	if (ret == NVML_SUCCESS) {
		utilization->gpu = (unsigned int)v[0];
		utilization->memory = (unsigned int)v[1];
	}
	return ret;
}

static nvmlReturn_t codec_util(nvmlDevice_t device, const char *key, unsigned int *utilization,
			       unsigned int *period_us)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(device, key, 2, &v);
	if (ret == NVML_SUCCESS) {
		*utilization = (unsigned int)v[0];
		*period_us = (unsigned int)v[1];
	}
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
						       unsigned int *samplingPeriodUs)
{
	return codec_util(device, "encoder", utilization, samplingPeriodUs);
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
						       unsigned int *samplingPeriodUs)
{
	return codec_util(device, "decoder", utilization, samplingPeriodUs);
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(device, "memory", 4, &v);
	if (ret == NVML_SUCCESS) {
		memory->total = v[0];
		memory->free = v[2];
		memory->used = v[3];
	}
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	unsigned long long *v;
	nvmlReturn_t ret;
	if (!memory || memory->version != NVML_MEMORY_V2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	ret = get(device, "memory", 4, &v);
	if (ret == NVML_SUCCESS) {
		memory->total = v[0];
		memory->reserved = v[1];
		memory->free = v[2];
		memory->used = v[3];
	}
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType, unsigned int *temp)
{
	unsigned long long *v;
	nvmlReturn_t ret;
	if (sensorType != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_INVALID_ARGUMENT;
	ret = get(device, "temperature", 1, &v);
	if (ret == NVML_SUCCESS)
		*temp = (unsigned int)v[0];
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
	unsigned long long *v;
	nvmlReturn_t ret;
	if (!temperature || temperature->version != NVML_TEMPERATURE_V1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (temperature->sensorType != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_INVALID_ARGUMENT;
	ret = get(device, "temperature", 1, &v);
	if (ret == NVML_SUCCESS)
		temperature->temperature = (int)v[0];
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(device, "power_mw", 1, &v);
	if (ret == NVML_SUCCESS)
		*power = (unsigned int)v[0];
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(device, "energy_mj", 1, &v);
	if (ret == NVML_SUCCESS)
		*energy = v[0];
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
	unsigned long long *v;
	const char *key = type == NVML_CLOCK_SM ? "clock_sm" : type == NVML_CLOCK_MEM ? "clock_mem" : NULL;
	nvmlReturn_t ret;
	if (!key)
		return NVML_ERROR_NOT_SUPPORTED;
	ret = get(device, key, 1, &v);
	if (ret == NVML_SUCCESS)
		*clock = (unsigned int)v[0];
	return ret;
}

static nvmlReturn_t event_reasons(nvmlDevice_t device, unsigned long long *reasons)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(device, "clocks_event_reasons", 1, &v);
	if (ret == NVML_SUCCESS)
		*reasons = v[0];
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
	return event_reasons(device, reasons);
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
								 unsigned long long *reasons)
{
	return event_reasons(device, reasons);
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
						 unsigned int *isPending, unsigned int *failureOccurred)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(device, "remapped_rows", 4, &v);
	if (ret == NVML_SUCCESS) {
		*corrRows = (unsigned int)v[0];
		*uncRows = (unsigned int)v[1];
		*isPending = (unsigned int)v[2];
		*failureOccurred = (unsigned int)v[3];
	}
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!valid(device) || valuesCount < 0 || !values)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < valuesCount; i++) {
		nvmlFieldValue_t *out = &values[i];
		out->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		out->timestamp = now_ns(CLOCK_REALTIME) / 1000;
		out->latencyUsec = 0;
		for (int j = 0; j < device->n_fields; j++) {
			struct field *f = &device->fields[j];
			if (f->id != out->fieldId || f->scope != out->scopeId)
				continue;
			out->nvmlReturn = f->err;
			if (f->err)
				break;
			if (f->id == NVML_FI_DEV_MEMORY_TEMP) { /* NVML gives this one as a uint */
				out->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
				out->value.uiVal = (unsigned int)f->v;
			} else {
				out->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
				out->value.ullVal = f->v;
			}
			break;
		}
	}
	return NVML_SUCCESS;
}

/* ---- processes ---- */
ZT_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
							       nvmlProcessInfo_t *infos)
{
	unsigned int n;
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!valid(device) || !infoCount)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (device->procs_err)
		return device->procs_err;
	n = (unsigned int)device->n_procs;
	if (*infoCount < n || (!infos && n)) {
		*infoCount = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	if (n)
		memcpy(infos, device->procs, n * sizeof(*infos));
	*infoCount = n;
	return NVML_SUCCESS;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
						       nvmlProcessUtilizationSample_t *utilization,
						       unsigned int *processSamplesCount,
						       unsigned long long lastSeenTimeStamp)
{
	unsigned int n;
	unsigned long long stamp = (unsigned long long)(now_ns(CLOCK_REALTIME) / 1000);
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!valid(device) || !processSamplesCount)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (device->utils_err)
		return device->utils_err;
	n = (unsigned int)device->n_utils;
	/* One sample per process per call, taken now: always newer than the last seen. */
	if (n == 0 || stamp <= lastSeenTimeStamp)
		return NVML_ERROR_NOT_FOUND;
	if (!utilization || *processSamplesCount < n) {
		*processSamplesCount = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned int i = 0; i < n; i++) {
		utilization[i] = device->utils[i];
		utilization[i].timeStamp = stamp;
	}
	*processSamplesCount = n;
	return NVML_SUCCESS;
}

/* ---- events ---- */
ZT_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(device, "event_types", 1, &v);
	if (ret == NVML_SUCCESS)
		*eventTypes = v[0];
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!set)
		return NVML_ERROR_INVALID_ARGUMENT;
	*set = calloc(1, sizeof(**set));
	return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

ZT_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
						nvmlEventSet_t set)
{
	unsigned long long supported = 0;
	nvmlReturn_t ret = nvmlDeviceGetSupportedEventTypes(device, &supported);
	int index;
	if (ret != NVML_SUCCESS)
		return ret;
	if (!set)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (eventTypes & ~supported)
		return NVML_ERROR_NOT_SUPPORTED;
	index = (int)(device - devices);
	set->mask[index] |= eventTypes;
	set->reg_mono_ns[index] = now_ns(CLOCK_MONOTONIC);
	set->reg_real_ns[index] = now_ns(CLOCK_REALTIME);
	return NVML_SUCCESS;
}

static void log_xid(int device, unsigned long long xid, long long due_real_ns)
{
	char line[160];
	snprintf(line, sizeof(line), "xid %d %llu due_ns %lld delivered_ns %lld\n", device, xid,
		 due_real_ns, now_ns(CLOCK_REALTIME));
	log_line(line);
}

ZT_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	long long deadline = now_ns(CLOCK_MONOTONIC) + (long long)timeoutms * 1000000ll;
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!set || !data)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (;;) {
		long long now = now_ns(CLOCK_MONOTONIC), next = deadline;
		int best_dev = -1, best_xid = -1;
		long long best_due = 0;
		for (int d = 0; d < n_devices; d++) {
			if (!(set->mask[d] & NVML_EVENT_XID))
				continue;
			for (int x = 0; x < devices[d].n_xids; x++) {
				long long due = set->reg_mono_ns[d] + devices[d].xid_after_ms[x] * 1000000ll;
				if (!set->delivered[d][x] && (best_dev < 0 || due < best_due)) {
					best_dev = d;
					best_xid = x;
					best_due = due;
				}
			}
		}
		if (best_dev >= 0 && best_due <= now) {
			set->delivered[best_dev][best_xid] = 1;
			memset(data, 0, sizeof(*data));
			data->device = &devices[best_dev];
			data->eventType = NVML_EVENT_XID;
			data->eventData = devices[best_dev].xid[best_xid];
			data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
			log_xid(best_dev, data->eventData,
				set->reg_real_ns[best_dev] + devices[best_dev].xid_after_ms[best_xid] * 1000000ll);
			return NVML_SUCCESS;
		}
		if (now >= deadline)
			return NVML_ERROR_TIMEOUT;
		if (best_dev >= 0 && best_due < next)
			next = best_due;
		struct timespec pause = {(next - now) / 1000000000ll, (next - now) % 1000000000ll};
		nanosleep(&pause, NULL);
	}
}

ZT_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	if (!set)
		return NVML_ERROR_INVALID_ARGUMENT;
	free(set);
	return NVML_SUCCESS;
}

/* ---- MIG and GPM ---- */
ZT_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
					    unsigned int *pendingMode)
{
	unsigned long long *v;
	nvmlReturn_t ret;
	if (!currentMode || !pendingMode)
		return NVML_ERROR_INVALID_ARGUMENT;
	ret = get(device, "mig_mode", 2, &v);
	if (ret == NVML_SUCCESS) {
		*currentMode = (unsigned int)v[0];
		*pendingMode = (unsigned int)v[1];
	}
	return ret;
}

/* Whether the device has GPM: its `gpm` line; none is 0 (a GPU before Hopper). */
static nvmlReturn_t gpm_support(nvmlDevice_t d, unsigned int *supported)
{
	unsigned long long *v;
	nvmlReturn_t ret = get(d, "gpm", 1, &v);
	*supported = 0;
	if (ret == NVML_ERROR_NOT_SUPPORTED) {
		for (int i = 0; i < d->n_entries; i++)
			if (!strcmp(d->entries[i].key, "gpm"))
				return ret; /* scripted `gpm !3` */
		return NVML_SUCCESS;
	}
	if (ret == NVML_SUCCESS)
		*supported = v[0] != 0;
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
	unsigned int supported;
	nvmlReturn_t ret;
	if (!gpmSupport)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	ret = gpm_support(device, &supported);
	if (ret == NVML_SUCCESS)
		gpmSupport->isSupportedDevice = supported;
	return ret;
}

ZT_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!gpmSample)
		return NVML_ERROR_INVALID_ARGUMENT;
	*gpmSample = calloc(1, sizeof(**gpmSample));
	if (!*gpmSample)
		return NVML_ERROR_UNKNOWN;
	gpm_allocated++;
	return NVML_SUCCESS;
}

ZT_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!gpmSample)
		return NVML_ERROR_INVALID_ARGUMENT;
	free(gpmSample);
	gpm_freed++;
	return NVML_SUCCESS;
}

ZT_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
	unsigned int supported;
	nvmlReturn_t ret;
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!valid(device) || !gpmSample)
		return NVML_ERROR_INVALID_ARGUMENT;
	ret = gpm_support(device, &supported);
	if (ret != NVML_SUCCESS)
		return ret;
	if (!supported)
		return NVML_ERROR_NOT_SUPPORTED;
	gpmSample->device = device;
	gpmSample->seq = ++gpm_seq;
	return NVML_SUCCESS;
}

ZT_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
	nvmlGpmSample_t one, two;
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!metricsGet)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	one = metricsGet->sample1;
	two = metricsGet->sample2;
	if (metricsGet->numMetrics > NVML_GPM_METRIC_MAX || !one || !two || one == two)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!one->device || one->device != two->device || one->seq >= two->seq)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
		nvmlGpmMetric_t *out = &metricsGet->metrics[i];
		out->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		out->value = 0.0;
		out->metricInfo.shortName = out->metricInfo.longName = out->metricInfo.unit = NULL;
		for (int j = 0; j < two->device->n_gpm; j++) {
			struct gpm_metric *m = &two->device->gpm[j];
			if (m->id != out->metricId)
				continue;
			out->nvmlReturn = m->err;
			out->value = m->err ? 0.0 : m->pct;
			break;
		}
	}
	return NVML_SUCCESS;
}
