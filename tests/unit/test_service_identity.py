"""Service names from real command lines and cgroup paths (zerotrace.service_identity)."""

from __future__ import annotations

import pytest

from zerotrace.errors import ConfigError
from zerotrace.service_identity import (
    ServiceRule,
    entry_point,
    parse_service_names,
    record_service,
    service_from_cgroup,
    service_name,
    split_cmdline,
)

pytestmark = pytest.mark.unit

POD_UID = "7f3c1e2a-1b2c-4d5e-8f90-1234567890ab"
CID = "3f4a5b6c7d8e9f00112233445566778899aabbccddeeff00112233445566778f"


@pytest.mark.parametrize(
    ("cmdline", "name"),
    [
        (
            "python3 -m vllm.entrypoints.openai.api_server --model m --port 8000",
            "vllm.entrypoints.openai.api_server",
        ),
        (
            "/usr/bin/python3 -m sglang.launch_server --model-path m --port 30000",
            "sglang.launch_server",
        ),
        ("python3 -m llama_cpp.server --model /m/x.gguf", "llama_cpp.server"),
        ("/usr/bin/python3 /opt/llama/server.py --port 1", "server"),
        ("python3 -u -X dev -W ignore /srv/app.py", "app"),
        ("python3 -um http.server 8000", "http.server"),
        ("python3.11 -mhttp.server", "http.server"),
        ("python3 -c import time; time.sleep(1)", None),
        ("python3", None),
        ("python3 -", None),
        (
            "/opt/venv/bin/python /opt/venv/bin/uvicorn app.main:app --host 0.0.0.0 --port 8000",
            "app.main",
        ),
        ("uvicorn app.main:app --reload", "app.main"),
        ("uvicorn --factory app.factory:create_app()", "app.factory"),
        ("python -m uvicorn main:app --port 8080", "main"),
        ("gunicorn -w 4 -k uvicorn.workers.UvicornWorker -b 0.0.0.0:8000 app.main:app", "app.main"),
        ("gunicorn --config python:conf.gunicorn myproject.wsgi:application", "myproject.wsgi"),
        ("gunicorn: worker [myproject.wsgi:application]", "myproject.wsgi"),
        ("hypercorn --bind 127.0.0.1:8000 service.asgi:app", "service.asgi"),
        ("celery -A proj worker -l info", "proj"),
        ("/usr/bin/python3 /usr/local/bin/celery --app=proj.tasks:app beat", "proj.tasks"),
        ("torchrun --nproc_per_node=8 --master_port 29500 train.py --lr 0.1", "train"),
        ("/usr/bin/python3 -m torch.distributed.run --nproc-per-node 2 finetune.py", "finetune"),
        ("/usr/bin/python3 -u train.py --local-rank=0", "train"),
        ("ray::LLMServer.generate", "ray::LLMServer"),
        ("ray::IDLE", "ray::IDLE"),
        (
            "/usr/bin/python3 /usr/local/bin/text-generation-server serve bigscience/bloom",
            "text-generation-server",
        ),
        ("java -Xmx2g -jar /opt/zipkin/zipkin-server-3.4.jar", "zipkin-server-3.4"),
        ("java -cp lib/*:conf com.example.Main --port 1", "com.example.Main"),
        ("node server.js", "server"),
        ("node --inspect /srv/gateway/dist/index.js", "gateway"),
        ("node -e console.log(1)", None),
        ("bash /opt/scripts/run-vllm.sh --port 8000", "run-vllm"),
        ("/bin/sh -c exec python3 -m foo", None),
        ("bash -x ./start.sh", "start"),
        ("/usr/local/bin/llama-server -m /models/q4.gguf --port 8080", None),
        ("ollama serve", None),
        ("text-generation-launcher --model-id m", None),
    ],
)
def test_the_entry_point_of_a_command_line(cmdline: str, name: str | None) -> None:
    assert entry_point(cmdline.split(" ")) == name


@pytest.mark.parametrize(
    ("cmdline", "comm", "name"),
    [
        (
            "/usr/local/bin/llama-server -m /models/q4.gguf --port 8080",
            "llama-server",
            "llama-server",
        ),
        ("/usr/local/bin/ollama serve", "ollama", "ollama"),
        ("/usr/local/bin/ollama runner --model /root/.ollama/models/blobs/sha", "ollama", "ollama"),
        ("text-generation-launcher --model-id m", "text-generation", "text-generation-launcher"),
        (
            "python3 -m vllm.entrypoints.openai.api_server",
            "python3",
            "vllm.entrypoints.openai.api_server",
        ),
        ("python3 -c pass", "python3", "python3"),
        ("", "kworker/0:1", "kworker/0:1"),
    ],
)
def test_a_service_without_cgroup_or_mapping(cmdline: str, comm: str, name: str) -> None:
    assert service_name(comm, cmdline.split(" ") if cmdline else []) == name


@pytest.mark.parametrize(
    ("cgroup", "unit", "container"),
    [
        ("0::/system.slice/vllm.service\n", "vllm", None),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/ollama.service",
            "ollama",
            None,
        ),
        ("0::/system.slice/llm-batch.scope", "llm-batch", None),
        ("0::/user.slice/user-0.slice/session-3.scope", None, None),
        ("0::/system.slice/run-u42.scope", None, None),
        ("0::/user.slice/user-1000.slice/user@1000.service/init.scope", None, None),
        ("0::/", None, None),
        (f"0::/system.slice/docker-{CID}.scope", None, f"docker/{CID[:12]}"),
        (
            f"12:memory:/docker/{CID}\n11:cpu,cpuacct:/docker/{CID}\n1:name=systemd:/docker/{CID}",
            None,
            f"docker/{CID[:12]}",
        ),
        (f"0::/machine.slice/libpod-{CID}.scope/container", None, f"podman/{CID[:12]}"),
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{POD_UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
            None,
            f"pod/{POD_UID}/{CID[:12]}",
        ),
        (
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
            f"{POD_UID.replace('-', '_')}.slice/crio-{CID}.scope",
            None,
            f"pod/{POD_UID}/{CID[:12]}",
        ),
        (
            f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/crio-{CID}.scope",
            None,
            f"pod/{POD_UID}/{CID[:12]}",
        ),
        (
            f"11:memory:/kubepods/burstable/pod{POD_UID}/{CID}\n"
            f"1:name=systemd:/kubepods/burstable/pod{POD_UID}/{CID}",
            None,
            f"pod/{POD_UID}/{CID[:12]}",
        ),
        (
            f"0::/system.slice/containerd.service/kubepods-burstable-pod{POD_UID}.slice:cri-containerd:{CID}",
            None,
            f"pod/{POD_UID}/{CID[:12]}",
        ),
    ],
)
def test_unit_and_container_from_a_cgroup_path(
    cgroup: str, unit: str | None, container: str | None
) -> None:
    assert service_from_cgroup(cgroup) == (unit, container)


def test_the_entry_point_wins_over_the_unit_and_the_unit_over_the_binary() -> None:
    vllm = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    unit = "0::/system.slice/llm.service"
    assert service_name("python3", vllm, unit) == "vllm.entrypoints.openai.api_server"
    assert service_name("llama-server", ["/usr/bin/llama-server"], unit) == "llm"


def test_the_container_names_what_the_program_does_not() -> None:
    docker = f"0::/system.slice/docker-{CID}.scope"
    assert service_name("python3", ["python3", "-c", "pass"], docker) == f"docker/{CID[:12]}"
    assert service_name("llama-server", ["/llama-server"], docker) == "llama-server"
    assert service_name("python3", ["python3", "-m", "app"], docker) == "app"
    assert service_name("python3", [], docker) == f"docker/{CID[:12]}"


def test_the_mapping_matches_comm_derived_name_or_command_line_first_entry_first() -> None:
    rules = parse_service_names(
        "llama-server=llm, *http.server*=files,vllm.entrypoints.*=vllm,*--port=9*=nine"
    )
    assert service_name("llama-server", ["/x/llama-server"], rules=rules) == "llm"
    assert service_name("python3", ["python3", "-m", "http.server"], rules=rules) == "files"
    vllm = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert service_name("python3", vllm, rules=rules) == "vllm"
    assert service_name("node", ["node", "a.js", "--port=9000"], rules=rules) == "nine"
    assert service_name("node", ["node", "a.js", "--port=8000"], rules=rules) == "a"


def test_the_mapping_syntax() -> None:
    assert parse_service_names("") == ()
    assert parse_service_names(" a=b ,, c*=d ") == (ServiceRule("a", "b"), ServiceRule("c*", "d"))
    assert parse_service_names("*--port=80*=web") == (ServiceRule("*--port=80*", "web"),)


@pytest.mark.parametrize("text", ["vllm", "=x", "a=", "a=two words"])
def test_a_bad_mapping_is_one_config_error_line(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^ZEROTRACE_SERVICE_NAMES: .* is not pattern=name") as e:
        parse_service_names(text)
    assert "\n" not in str(e.value)


def test_a_cmdline_as_proc_gives_it() -> None:
    assert split_cmdline(b"python3\0-m\0http.server\0") == ["python3", "-m", "http.server"]
    assert split_cmdline(b"ray::Actor.run\0\0\0") == ["ray::Actor.run"]
    assert split_cmdline(b"gunicorn: master [app:app]") == ["gunicorn:", "master", "[app:app]"]
    assert split_cmdline(b"") == []


def test_a_record_s_service_or_its_process_name() -> None:
    assert record_service({"process_name": "python3", "service": "app"}) == "app"
    assert record_service({"process_name": "python3", "service": None}) == "python3"
    assert record_service({"process_name": "python3"}) == "python3"
