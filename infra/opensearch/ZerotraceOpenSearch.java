// Minimal single-node OpenSearch 2.19 launcher for zerotrace development/tests.
//
// Why this exists: the stock entry point (org.opensearch.bootstrap.OpenSearch)
// refuses to run as root, expects a distribution layout (modules/, bin/, jdk
// checks, jvm.options) and installs a SecurityManager. Here we only have the
// Maven Central jars, so we build the Node directly (like OpenSearch's test
// MockNode does) and hand it the module plugins as classpath plugins.
//
// Build/run: see README.md next to this file.

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.http.HttpServerTransport;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;

public final class ZerotraceOpenSearch {

    // The "modules" a real distribution would load from modules/.
    private static final List<Class<? extends Plugin>> MODULES = List.of(
        org.opensearch.transport.Netty4Plugin.class,              // HTTP + transport (core has neither)
        org.opensearch.analysis.common.CommonAnalysisPlugin.class, // standard analyzers/normalizers
        org.opensearch.index.mapper.MapperExtrasPlugin.class,      // scaled_float, rank_feature, ...
        org.opensearch.painless.PainlessPlugin.class               // scripts (sort/update/ingest)
    );

    /** Node's plugin-taking constructor is protected; this subclass just exposes it. */
    static final class ClasspathNode extends Node {
        ClasspathNode(Environment env, Collection<Class<? extends Plugin>> plugins) {
            // forbidPrivateIndexSettings=true: behave like production (reject index.version.created etc.).
            super(env, plugins, true);
        }
    }

    // Written to <home>/config only if no log4j2*.properties is there yet, so it can be customised.
    // Console (stdout) only gets WARN and above to keep test output readable; the full INFO log goes
    // to <home>/logs/<cluster>.log. The opensearch.logs.* properties are set by LogConfigurator.
    // Pattern = stock one; LogConfigurator insists on "[%node_name]%marker" (it rewrites patterns
    // that have %marker without %node_name, with a warning).
    private static final String LOG4J2_PROPERTIES = """
        status = error
        appender.console.type = Console
        appender.console.name = console
        appender.console.layout.type = PatternLayout
        appender.console.layout.pattern = [%d{ISO8601}][%-5p][%-25c{1.}] [%node_name]%marker %m%n
        appender.file.type = RollingFile
        appender.file.name = file
        appender.file.fileName = ${sys:opensearch.logs.base_path}${sys:file.separator}${sys:opensearch.logs.cluster_name}.log
        appender.file.filePattern = ${sys:opensearch.logs.base_path}${sys:file.separator}${sys:opensearch.logs.cluster_name}-%i.log.gz
        appender.file.layout.type = PatternLayout
        appender.file.layout.pattern = [%d{ISO8601}][%-5p][%-25c{1.}] [%node_name]%marker %m%n
        appender.file.policies.type = Policies
        appender.file.policies.size.type = SizeBasedTriggeringPolicy
        appender.file.policies.size.size = 64MB
        appender.file.strategy.type = DefaultRolloverStrategy
        appender.file.strategy.max = 4
        # warns on every start that dangling-index auto-import is off (the intended default)
        logger.dangling.name = org.opensearch.gateway.DanglingIndicesState
        logger.dangling.level = error
        rootLogger.level = info
        rootLogger.appenderRef.console.ref = console
        rootLogger.appenderRef.console.level = warn
        rootLogger.appenderRef.file.ref = file
        """;

    public static void main(String[] args) throws Exception {
        // Must be set before any log4j class initialises (same values as the stock jvm.options):
        // - no log4j shutdown hook: we close the node ourselves on SIGTERM and want logging to
        //   keep working while it shuts down; we stop log4j explicitly afterwards.
        // - no JMX MBeans: pointless here and slows startup.
        System.setProperty("log4j.shutdownHookEnabled", "false");
        System.setProperty("log4j2.disable.jmx", "true");
        // Stock jvm.options uses SPI,COMPAT on JDK < 23 so date/locale formatting matches what
        // OpenSearch's date parsers were written against. Read lazily by the JDK, so setting
        // it here (before any locale-sensitive call) is enough; an explicit -D wins.
        if (System.getProperty("java.locale.providers") == null) {
            System.setProperty("java.locale.providers", "SPI,COMPAT");
        }

        Path home = null;
        int httpPort = 9200, transportPort = 9300;
        String clusterName = "zerotrace";
        Settings.Builder extra = Settings.builder();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = (i + 1 < args.length) ? args[i + 1] : null;
            switch (a) {
                case "--home": home = Paths.get(req(a, v)).toAbsolutePath().normalize(); i++; break;
                case "--http-port": httpPort = Integer.parseInt(req(a, v)); i++; break;
                case "--transport-port": transportPort = Integer.parseInt(req(a, v)); i++; break;
                case "--cluster-name": clusterName = req(a, v); i++; break;
                case "-E": { // escape hatch: -E some.setting=value
                    String kv = req(a, v); i++;
                    int eq = kv.indexOf('=');
                    if (eq <= 0) usage("bad -E " + kv);
                    extra.put(kv.substring(0, eq), kv.substring(eq + 1));
                    break;
                }
                default: usage("unknown argument " + a);
            }
        }
        if (home == null) usage("--home is required");

        Path config = home.resolve("config");
        Files.createDirectories(config);
        Files.createDirectories(home.resolve("data"));
        Files.createDirectories(home.resolve("logs"));
        writeDefaultLog4jConfig(config);

        String nodeName = clusterName + "-node";
        Settings settings = Settings.builder()
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            .put("cluster.name", clusterName)
            .put("node.name", nodeName)
            // Loopback only: dev server, and non-loopback would also make a real
            // distribution enforce production bootstrap checks.
            .put("network.host", "127.0.0.1")
            .put("http.port", httpPort)
            .put("transport.port", transportPort)
            // One node that elects itself; no discovery / initial_cluster_manager_nodes needed.
            .put("discovery.type", "single-node")
            // Dev machines/CI disks are often >90% full; the disk watermarks would then
            // block shard allocation (red/yellow forever) or make indices read-only.
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            // Pick the Netty4Plugin implementations explicitly (also its default).
            .put("http.type", "netty4")
            .put("transport.type", "netty4")
            .put(extra.build())
            .build();

        // Registers the listener LogConfigurator.configure() checks for config errors; must
        // precede any logging, exactly as the stock Bootstrap does.
        LogConfigurator.registerErrorListener();
        LogConfigurator.setNodeName(nodeName); // for %node_name; the stock Bootstrap does the same
        // Resolves path.* and reads <home>/config/opensearch.yml if present (our settings win).
        Environment env = InternalSettingsPreparer.prepareEnvironment(
            settings, Collections.emptyMap(), config, () -> "zerotrace-node");
        // configure() also redirects System.out/err into the "stdout"/"stderr" loggers (i.e. the
        // log file), so keep the real stdout for our own status lines.
        java.io.PrintStream out = System.out, err = System.err;
        LogConfigurator.configure(env);

        // SIGTERM/SIGINT -> release main thread, which closes the node and exits 0. A plain JVM
        // shutdown hook would make the exit status 143, hence sun.misc.Signal (jdk.unsupported,
        // accessible from the classpath without flags).
        CountDownLatch stop = new CountDownLatch(1);
        for (String sig : new String[] {"TERM", "INT"}) {
            sun.misc.Signal.handle(new sun.misc.Signal(sig), s -> stop.countDown());
        }

        Node node = null;
        try {
            node = new ClasspathNode(env, MODULES);
            node.start(); // returns once the node has elected itself and bound its ports
            // Don't report ready before the cluster state is recovered and health is usable.
            node.client().admin().cluster().prepareHealth().setWaitForYellowStatus()
                .setTimeout(org.opensearch.common.unit.TimeValue.timeValueSeconds(60)).get();
            // Replicas can never be assigned on one node, so every new index would leave health
            // yellow. Index-level defaults can't be node settings, and this one is only read from
            // the cluster metadata, so set it as a persistent cluster setting (once; a value set
            // later through the API is kept). Templates/index settings can still override it.
            String replicas = "cluster.default_number_of_replicas";
            if (node.client().admin().cluster().prepareState().get().getState()
                    .metadata().settings().get(replicas) == null) {
                node.client().admin().cluster().prepareUpdateSettings()
                    .setPersistentSettings(Settings.builder().put(replicas, 0)).get();
            }
        } catch (Throwable t) {
            // System.err now goes to the log file; make startup failures (port in use, bad -E
            // setting, ...) visible on the real stderr and exit non-zero.
            err.println("zerotrace-opensearch: failed to start: " + t);
            t.printStackTrace(err);
            if (node != null) {
                try { node.close(); } catch (Throwable ignored) { }
            }
            System.exit(1);
        }
        int boundHttp = node.injector().getInstance(HttpServerTransport.class)
            .boundAddress().publishAddress().getPort();
        long sinceJvmStart = System.currentTimeMillis()
            - java.lang.management.ManagementFactory.getRuntimeMXBean().getStartTime();
        out.printf("zerotrace-opensearch: ready on http://127.0.0.1:%d%n", boundHttp);
        out.printf("zerotrace-opensearch: %d ms after JVM start, home %s, logs %s%n",
            sinceJvmStart, home, env.logsFile());
        out.flush();

        stop.await();
        out.println("zerotrace-opensearch: stopping");
        int rc = 0;
        try {
            node.close();
            if (!node.awaitClose(30, TimeUnit.SECONDS)) {
                err.println("zerotrace-opensearch: node did not close within 30s");
                rc = 1;
            }
        } catch (IOException | RuntimeException e) {
            e.printStackTrace(err);
            rc = 1;
        }
        org.apache.logging.log4j.core.config.Configurator.shutdown(
            (org.apache.logging.log4j.core.LoggerContext) org.apache.logging.log4j.LogManager.getContext(false));
        out.println("zerotrace-opensearch: stopped");
        out.flush();
        // OpenSearch threads are daemons, but exit explicitly in case anything lingers.
        System.exit(rc);
    }

    private static void writeDefaultLog4jConfig(Path config) throws IOException {
        try (var files = Files.list(config)) {
            boolean present = files.anyMatch(p -> {
                String n = p.getFileName().toString();
                return n.startsWith("log4j2") && n.endsWith(".properties");
            });
            if (!present) {
                Files.write(config.resolve("log4j2.properties"), LOG4J2_PROPERTIES.getBytes(StandardCharsets.UTF_8));
            }
        }
    }

    private static String req(String flag, String value) {
        if (value == null) usage(flag + " needs a value");
        return value;
    }

    private static void usage(String msg) {
        System.err.println("zerotrace-opensearch: " + msg);
        System.err.println("usage: ZerotraceOpenSearch --home DIR [--http-port 9200] [--transport-port 9300]"
            + " [--cluster-name zerotrace] [-E key=value ...]");
        System.exit(2);
    }
}
