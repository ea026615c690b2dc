"""The fleet: `deploy|profile|verify --inventory` and the shipped Ansible modules under ansible-playbook.

Three sshd on 127.0.0.1 (separate ports, host and client keys, base directories): two playing emulated
aarch64 boards (their runners run through qemu-aarch64-static, as in test_remote.py), and a
third sshd, stopped, whose port refuses connections; it claims to be an rpi4, so the fleet needs two builds.
"""
from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from modelrun import cli, matmul_relu_model, require_emulator
from sshd import start_server

pytestmark = pytest.mark.ssh

ROOT = Path(__file__).resolve().parent.parent
LIVE = ("pi-a", "pi-b")
DEAD = "pi-dead"


def error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("fluidml-xc: error: ") and sum("error:" in line for line in lines) == 1, proc.stderr
    return lines[-1]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    require_emulator("qemu-aarch64")
    work = tmp_path_factory.mktemp("fleet")
    servers = {name: start_server(work / f"sshd-{name}") for name in LIVE}
    dead = start_server(work / "sshd-dead")  # a third sshd, stopped: its port refuses connections
    dead.stop()
    dead_port = dead.port
    model = work / "tiny.onnx"
    onnx.save(matmul_relu_model(7), str(model))
    user = getpass.getuser()
    lines = ["[boards]"]
    for name, srv in servers.items():
        lines.append(f"{name} ansible_host=127.0.0.1 ansible_port={srv.port} ansible_ssh_private_key_file={srv.client_key} "
                     f"fluidml_known_hosts={srv.known_hosts} fluidml_base_dir={work / ('base-' + name)}")
    lines += ["", "[boards:vars]", "fluidml_board=qemu-aarch64", "", "[lab]",
              f"{DEAD} ansible_host=127.0.0.1 ansible_port={dead_port} fluidml_board=rpi4 "
              f"ansible_ssh_private_key_file={dead.client_key} fluidml_known_hosts={dead.known_hosts}", "", "[all:vars]", f"ansible_user={user}", ""]
    (work / "hosts.ini").write_text("\n".join(lines))
    yaml_hosts = {name: {"ansible_host": "127.0.0.1", "ansible_port": srv.port,
                         "ansible_ssh_private_key_file": str(srv.client_key), "fluidml_known_hosts": str(srv.known_hosts),
                         "fluidml_base_dir": str(work / f"yaml-{name}")} for name, srv in servers.items()}
    yaml = {"all": {"vars": {"ansible_user": user},
                    "children": {"boards": {"vars": {"fluidml_board": "qemu-aarch64"}, "hosts": yaml_hosts},
                                 "lab": {"hosts": {DEAD: {"ansible_host": "127.0.0.1", "ansible_port": dead_port,
                                                          "fluidml_board": "rpi4"}}}}}}
    (work / "hosts.yml").write_text(json.dumps(yaml, indent=1))  # JSON is YAML
    yield {"work": work, "model": model, "servers": servers}
    for srv in servers.values():
        srv.stop()


def test_inventory_deploy_then_profile_two_live_one_dead(fleet):
    work = fleet["work"]
    # generous connect timeouts: CI machines are busy, and the test is about behaviour, not speed
    proc = cli("deploy", str(fleet["model"]), "--inventory", str(work / "hosts.ini"), "--connect-timeout", "60", cwd=work)
    err = error_line(proc)
    assert "deploy failed on 1 of 3 hosts" in err and DEAD in err and "refused" in err
    assert "pi-a" not in err and "pi-b" not in err
    # built once per distinct board: the emulated aarch64 boards share one build, the rpi4 gets its own
    assert proc.stderr.count("building tiny.onnx for qemu-aarch64") == 1
    assert proc.stderr.count("building tiny.onnx for rpi4") == 1
    assert sorted(p.name for p in (work / "build").iterdir() if not p.name.startswith(".")) == ["tiny-qemu-aarch64", "tiny-rpi4"]
    for name in LIVE:
        base = work / f"base-{name}"
        installed = base / os.readlink(base / "current")
        assert (installed / "runner").is_file() and os.access(installed / "runner", os.X_OK)
        assert f"== {name} (qemu-aarch64, 127.0.0.1:{fleet['servers'][name].port}): ok" in proc.stdout
    assert f"== {DEAD} (rpi4, " in proc.stdout and "FAILED" in proc.stdout
    # again with --json: the hosts' facts alone on stdout (all deployed already), the same in --json-out FILE
    proc = cli("deploy", str(fleet["model"]), "--inventory", str(work / "hosts.ini"), "--connect-timeout", "60",
               "--json", "--json-out", "deployed.json", cwd=work)
    assert DEAD in error_line(proc)
    data = json.loads(proc.stdout)
    assert data == json.loads((work / "deployed.json").read_text()) and set(data["hosts"]) == {*LIVE, DEAD}
    for name in LIVE:
        assert data["hosts"][name]["ok"] and data["hosts"][name]["deploy"]["already_present"], data["hosts"][name]
    assert not data["hosts"][DEAD]["ok"] and data["hosts"][DEAD]["deploy"] is None

    # profile the artifact directory (reused for its board, the rpi4 build found up to date), JSON on stdout
    artifact = work / "build" / "tiny-qemu-aarch64"
    page = work / "fleet.html"
    proc = cli("profile", str(artifact), "--inventory", str(work / "hosts.ini"), "--connect-timeout", "60", "--runs", "5", "--warmup", "1",
               "--json", "--html", str(page), cwd=work)
    err = error_line(proc)
    assert DEAD in err and "building" not in proc.stderr
    data = json.loads(proc.stdout)
    assert set(data["hosts"]) == {*LIVE, DEAD}
    for name in LIVE:
        host = data["hosts"][name]
        assert host["ok"] and host["profile"]["board"] == "qemu-aarch64", host.get("error")
        assert host["profile"]["latency_ms"]["median"] > 0 and host["profile"]["ops"]
        assert host["profile"]["where"].endswith(f":{fleet['servers'][name].port}")
    assert not data["hosts"][DEAD]["ok"] and "refused" in data["hosts"][DEAD]["error"]
    text = page.read_text()
    assert text.count('class="plot top-ops"') == 2
    # the hosts run their runners under qemu-user: marked emulated, never compared for speed
    assert 'id="compare-latency"' not in text and text.count("emulated: not compared") == 2
    (work / "fleet.json").write_text(proc.stdout)
    proc = cli("report", str(artifact), "--profile", str(work / "fleet.json"), "-o", str(work / "again.html"), cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert (work / "again.html").read_text().count('class="plot top-ops"') == 2


def test_inventory_yaml_limit_verify_all_ok(fleet):
    work = fleet["work"]
    proc = cli("verify", str(fleet["model"]), "--inventory", str(work / "hosts.yml"), "--limit", "boards", "--forks", "2",
               cwd=work)
    assert proc.returncode == 0, proc.stderr
    for name in LIVE:
        assert f"== {name} (qemu-aarch64" in proc.stdout
        assert (work / f"yaml-{name}").is_dir()
    assert DEAD not in proc.stdout and proc.stdout.count("  ok") >= 2


def test_inventory_threads(fleet):
    """--threads reaches every host's runner (profile JSON, verify), and a count past a build's is one line
    before any host is touched."""
    work = fleet["work"]
    artifact = work / "tiny-t2"
    proc = cli("build", str(fleet["model"]), "--board", "qemu-aarch64", "--threads", "2", "-o", str(artifact), cwd=work)
    assert proc.returncode == 0, proc.stderr
    hosts = ["--inventory", str(work / "hosts.ini"), "--limit", "boards", "--connect-timeout", "60"]
    proc = cli("profile", str(artifact), *hosts, "--threads", "2", "--runs", "3", "--warmup", "0", "--json", cwd=work)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {name: data["hosts"][name]["profile"]["threads"] for name in LIVE} == {name: 2 for name in LIVE}
    proc = cli("verify", str(artifact), *hosts, "--threads", "1", cwd=work)
    assert proc.returncode == 0 and proc.stdout.count("  ok") >= 2, proc.stderr
    proc = cli("verify", str(artifact), *hosts, "--threads", "1", "--json", cwd=work)
    assert proc.returncode == 0, proc.stderr
    checks = json.loads(proc.stdout)["hosts"]
    assert all(checks[name]["ok"] and checks[name]["verify"]["ok"] for name in LIVE)
    proc = cli("profile", str(artifact), *hosts, "--threads", "3", cwd=work)
    err = error_line(proc)
    assert "--threads 3: the qemu-aarch64 build" in err and "runs 1 to 2 threads" in err and "== pi-a" not in proc.stdout


def test_inventory_errors_are_one_line(fleet, tmp_path):
    work = fleet["work"]
    bad = tmp_path / "bad.yml"
    bad.write_text("all: [not: valid\n  - x")
    assert "not a valid Ansible inventory" in error_line(cli("deploy", "--inventory", str(bad), cwd=tmp_path))
    assert "no hosts in inventory" in error_line(
        cli("deploy", str(fleet["model"]), "--inventory", str(work / "hosts.ini"), "--limit", "nosuch", cwd=tmp_path))
    assert "either --host HOST or --inventory" in error_line(
        cli("deploy", "--inventory", str(work / "hosts.ini"), "--host", "x", cwd=tmp_path))
    err = error_line(cli("deploy", "--inventory", str(work / "hosts.ini"), cwd=tmp_path, pre="sys.modules['ansible'] = None; "))
    assert "fluidml-xc[fleet]" in err
    assert list(tmp_path.iterdir()) == [bad]


PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: deploy (built once per fluidml_board)
      fluidml_xc_deploy:
        model: "{{ model }}"
        build_dir: "{{ build_dir }}"
    - name: profile
      fluidml_xc_profile:
        model: "{{ model }}"
        build_dir: "{{ build_dir }}"
        runs: 5
        warmup: 1
        threads: 1
- hosts: localhost
  gather_facts: false
  tasks:
    - name: collect the profile facts
      copy:
        dest: "{{ out }}"
        content: |
          {% for h in groups['all'] %}{{ h }} {{ hostvars[h]['fluidml_xc_profile'] | default(none) | to_json }}
          {% endfor %}
"""


def ansible_playbook(work: Path, *args: str) -> subprocess.CompletedProcess:
    from fluidml_xc.fleet.ansible_plugins import ACTION_PLUGINS

    env = dict(os.environ, ANSIBLE_ACTION_PLUGINS=str(ACTION_PLUGINS), ANSIBLE_HOME=str(work / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_FORKS="5", ANSIBLE_CONFIG=str(work / "none.cfg"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "toolkit"), os.environ.get("PYTHONPATH")])))
    exe = Path(sys.executable).with_name("ansible-playbook")
    argv = [str(exe) if exe.exists() else shutil.which("ansible-playbook"), *args]
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)


def recap(stdout: str) -> dict[str, dict[str, int]]:
    out = {}
    for line in stdout.split("PLAY RECAP", 1)[1].splitlines():
        if ":" in line and "=" in line:
            host, _, counts = line.partition(":")
            out[host.strip()] = {k: int(v) for k, v in (kv.split("=") for kv in counts.split())}
    return out


def test_ansible_playbook_with_the_shipped_modules(fleet):
    work = fleet["work"]
    (work / "play.yml").write_text(PLAYBOOK)
    facts = work / "facts.json"
    extra = ["-e", f"model={fleet['model']}", "-e", f"build_dir={work / 'ansible-build'}", "-e", f"out={facts}"]
    proc = ansible_playbook(work, "-i", str(work / "hosts.ini"), str(work / "play.yml"), *extra)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # 4: a host was unreachable
    counts = recap(proc.stdout)
    assert counts[DEAD]["unreachable"] == 1 and counts[DEAD]["ok"] == 0
    for name in LIVE:
        assert counts[name]["ok"] == 2 and counts[name]["failed"] == 0 and counts[name]["unreachable"] == 0
    assert facts.is_file(), proc.stdout + proc.stderr
    profiles = dict((line.split(" ", 1)[0], json.loads(line.split(" ", 1)[1]))
                    for line in facts.read_text().splitlines() if line.strip())
    assert profiles[DEAD] is None
    for name in LIVE:
        assert profiles[name]["board"] == "qemu-aarch64" and profiles[name]["latency_ms"]["median"] > 0
        assert profiles[name]["threads"] == 1
        assert profiles[name]["where"].endswith(f":{fleet['servers'][name].port}")
    builds = sorted(p.name for p in (work / "ansible-build").iterdir() if not p.name.startswith("."))
    assert builds == ["tiny-qemu-aarch64", "tiny-rpi4"]

    # check mode: everything is deployed already, so nothing would change
    proc = ansible_playbook(work, "-i", str(work / "hosts.ini"), "--limit", "boards", "--check", str(work / "play.yml"),
                            *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = recap(proc.stdout)
    for name in LIVE:
        assert counts[name]["changed"] == 0 and counts[name]["skipped"] == 1, counts
