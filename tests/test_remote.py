"""Deploy, profile, verify and detect against a real OpenSSH server on 127.0.0.1 (the "board").

The artifacts are real aarch64 builds for the emulated board qemu-aarch64, so their runners run through
qemu-aarch64-static on the sshd host, exactly as on a board without hardware.
"""
from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import shutil
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from fluidml_xc.build import BuildOptions, build_model
from fluidml_xc.errors import RemoteError, RunError
from fluidml_xc.artifact import read_manifest, sha256_file
from fluidml_xc.remote.artifact import load_artifact
from fluidml_xc.remote.deploy import DeployOptions, deploy
from fluidml_xc.remote.profile import ProfileOptions, profile_remote
from fluidml_xc.remote.shell import sh
from fluidml_xc.remote.ssh import SshOptions, connect
from fluidml_xc.remote.verify import Tolerance, compare, make_feeds, reference_outputs, run_remote
from modelrun import cli, matmul_relu_model, one_line_error
from sshd import SilentListener, free_port, ssh_args, ssh_options, start_server

pytestmark = pytest.mark.ssh

ROOT = Path(__file__).resolve().parent.parent
WEIRD_DIR = "base dir with spaces/it's \"quoted\" $HOME `true` ;x"


# ---------------------------------------------------------------- fixtures and helpers

def build_tiny(workdir: Path, seed: int, board: str = "qemu-aarch64") -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"tiny{seed}.onnx"
    onnx.save(matmul_relu_model(seed), str(path))
    return build_model(path, BuildOptions(board=board, out_dir=workdir / f"tiny{seed}-{board}",
                                          record_last=False)).artifact


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("sshd"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("builds")
    return {"a": build_tiny(work, 1), "b": build_tiny(work, 2)}


@pytest.fixture
def empty_config(tmp_path) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text("")
    return path


def error_after_status(proc: subprocess.CompletedProcess) -> str:
    """The error line, which status lines of the remote steps (e.g. "uploaded ...") may precede (modelrun.one_line_error
    wants the error alone): the last line, and the only one that mentions an error."""
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("fluidml-xc: error: "), proc.stderr
    assert sum("error" in line for line in lines) == 1, proc.stderr
    return lines[-1]


def current_target(base: Path) -> str:
    return os.readlink(base / "current")


def with_runner(src: Path, dest: Path, c_source: str) -> Path:
    """A copy of artifact src whose runner and runner_prof are the given C program (aarch64, static musl)."""
    shutil.copytree(src, dest)
    (dest / "bad.c").write_text(c_source)
    subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "aarch64-linux-musl", "-O1", "-o",
                    str(dest / "runner"), str(dest / "bad.c")], check=True, capture_output=True, timeout=300)
    (dest / "bad.c").unlink()
    shutil.copy(dest / "runner", dest / "runner_prof")
    manifest = read_manifest(dest)
    manifest = dataclasses.replace(manifest, files={name: sha256_file(dest / name) for name in manifest.files},
                                   # relative to the artifact: the copy is elsewhere
                                   model=dataclasses.replace(manifest.model, path=str(manifest.model_path(src))))
    (dest / "manifest.json").write_text(manifest.to_json())
    return dest


# ---------------------------------------------------------------- end to end

def test_deploy_profile_verify_end_to_end(server, builds, empty_config, tmp_path):
    base = tmp_path / "board"
    common = ssh_args(server, empty_config) + ["--base-dir", str(base)]
    proc = cli("deploy", str(builds["a"]), *common)
    assert proc.returncode == 0, proc.stderr
    assert "uploaded" in proc.stderr and "sha256 verified" in proc.stderr
    assert "qemu-aarch64-static" in proc.stdout
    installed = base / current_target(base)
    assert (installed / "runner").is_file() and os.access(installed / "runner", os.X_OK)

    report_path = tmp_path / "profile.json"
    proc = cli("profile", str(builds["a"]), *common, "--runs", "20", "--warmup", "3", "--json-out", str(report_path))
    assert proc.returncode == 0, proc.stderr
    assert "latency" in proc.stdout and "MatMul" in proc.stdout and "qemu-aarch64-static" in proc.stdout
    report = json.loads(report_path.read_text())
    for key in ("median", "p90", "p99", "min"):
        assert report["latency_ms"][key] > 0
    assert report["latency_ms"]["min"] <= report["latency_ms"]["median"] <= report["latency_ms"]["p99"]
    assert report["peak_rss_bytes"] > 0 and report["arena_bytes"] >= 0 and report["runs"] == 20
    manifest = json.loads((builds["a"] / "manifest.json").read_text())
    assert [(op["name"], op["type"]) for op in report["ops"]] == [(op["name"], op["type"]) for op in manifest["ops"]]
    assert {"before", "after"} <= set(report["telemetry"])

    proc = cli("verify", str(builds["a"]), *common)
    assert proc.returncode == 0, proc.stderr
    assert "max abs err" in proc.stdout and " ok" in proc.stdout
    assert not list(base.glob(".run-*")), "verify leaves no scratch directory behind"


def test_verify_reports_mismatch_and_fails(server, builds, empty_config, tmp_path):
    """Compared against a different model, verify prints the errors and exits 6 (VerifyError)."""
    other = tmp_path / "other.onnx"
    onnx.save(matmul_relu_model(99), str(other))
    proc = cli("verify", str(builds["a"]), *ssh_args(server, empty_config), "--base-dir", str(tmp_path / "board"),
               "--model", str(other))
    assert proc.returncode == 6
    assert "FAIL" in proc.stdout
    assert "beyond tolerance" in error_after_status(proc)


def test_default_dir_is_the_last_build(server, builds, empty_config, tmp_path):
    proc = cli("deploy", *ssh_args(server, empty_config), cwd=tmp_path)
    assert "no build found: run `fluidml-xc build MODEL.onnx` first" in one_line_error(proc)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / ".last").write_text(f"{builds['a']}\n")
    proc = cli("deploy", *ssh_args(server, empty_config), "--base-dir", str(tmp_path / "board"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert current_target(tmp_path / "board").startswith("tiny1-qemu-aarch64-")


# ---------------------------------------------------------------- deploy behaviour

def test_redeploy_uploads_nothing(server, builds, empty_config, tmp_path):
    artifact = load_artifact(builds["a"])
    calls = []
    opts = DeployOptions(str(tmp_path / "board"), progress=lambda done, total, name: calls.append(done))
    with connect(ssh_options(server, empty_config)) as conn:
        first = deploy(conn, artifact, opts)
        assert first.uploaded_bytes == artifact.size and not first.already_present and calls
        assert sorted(p.name for p in Path(first.remote_dir).iterdir()) == ["manifest.json", "runner", "runner_prof"]
        calls.clear()
        second = deploy(conn, artifact, opts)
    assert second.already_present and second.uploaded_bytes == 0 and second.uploaded_files == 0
    assert calls == []
    assert second.remote_dir == first.remote_dir
    proc = cli("deploy", str(builds["a"]), *ssh_args(server, empty_config), "--base-dir", str(tmp_path / "board"))
    assert proc.returncode == 0 and "nothing uploaded" in proc.stderr


def test_upload_cut_midway_keeps_previous_deploy_and_retry_completes(server, builds, empty_config, tmp_path):
    base = tmp_path / "board"
    opts = DeployOptions(str(base))
    with connect(ssh_options(server, empty_config)) as conn:
        previous = deploy(conn, load_artifact(builds["a"]), opts)

    new = load_artifact(builds["b"])
    killed = []

    def cut(done: int, total: int, name: str) -> None:
        if not killed and 0 < done < total:
            killed.append(server.kill_sessions())

    conn = connect(ssh_options(server, empty_config))
    with pytest.raises(RemoteError, match="lost while (uploading|running)"):
        deploy(conn, new, DeployOptions(str(base), progress=cut))
    conn.close()
    assert killed and killed[0] >= 1
    assert current_target(base) == posixpath.basename(previous.remote_dir)
    runner = base / "current" / "runner"
    ran = subprocess.run(["qemu-aarch64-static", str(runner)], capture_output=True, timeout=60)
    assert ran.returncode == 0, ran.stderr

    with connect(ssh_options(server, empty_config)) as conn:
        retried = deploy(conn, new, opts)
    assert not retried.already_present and retried.uploaded_files == len(new.files)
    assert current_target(base) == posixpath.basename(retried.remote_dir)
    assert not list(base.glob(".tmp-*")), "the interrupted upload's temporary directory is cleaned up"
    assert (base / posixpath.basename(previous.remote_dir) / "runner").is_file(), "older deploys stay installed"


def test_remote_base_path_with_spaces_and_quotes(server, builds, empty_config, tmp_path):
    base = tmp_path / WEIRD_DIR
    artifact = load_artifact(builds["a"])
    with connect(ssh_options(server, empty_config)) as conn:
        deployment = deploy(conn, artifact, DeployOptions(str(base)))
        report = profile_remote(conn, deployment, artifact, ProfileOptions(runs=5, warmup=1))
        feeds = make_feeds(artifact, None)
        outputs = run_remote(conn, deployment, artifact, feeds)
    assert deployment.remote_dir == f"{base}/{posixpath.basename(deployment.remote_dir)}"
    assert (base / "current" / "manifest.json").is_file()
    assert report.latency_ms["median"] > 0 and [op["name"] for op in report.ops] == [op["name"] for op in artifact.manifest.ops]
    reference = reference_outputs(artifact.manifest.model_path(artifact.path), feeds)
    assert all(check.ok for check in compare(outputs, reference, Tolerance()))
    assert not (tmp_path / "base dir with spaces" / "it's").exists() and not Path("true").exists()


def test_tilde_base_dir_expands_on_the_board(server, empty_config):
    with connect(ssh_options(server, empty_config)) as conn:
        home = conn.home()
        assert home.startswith("/") and Path(home).is_dir()
        assert conn.absolute("~/.fluidml-xc") == posixpath.join(home, ".fluidml-xc")
        assert conn.absolute("rel dir/") == posixpath.join(home, "rel dir")


def test_board_that_does_not_fit_is_refused(server, builds, empty_config, tmp_path):
    """A real-hardware aarch64 build cannot run on the x86_64 "board": said before anything is uploaded."""
    rpi4 = build_tiny(tmp_path / "rpi4", 1, board="rpi4")
    with connect(ssh_options(server, empty_config)) as conn, \
            pytest.raises(RemoteError, match=r"is x86_64 \(64-bit userland\) but the artifact is for aarch64"):
        deploy(conn, load_artifact(rpi4), DeployOptions(str(tmp_path / "board")))
    assert not list((tmp_path / "board").iterdir())


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "small disk"
    mount_point.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=10m", "tmpfs", str(mount_point)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_full_disk_is_reported_and_previous_deploy_kept(server, builds, empty_config, small_disk):
    with connect(ssh_options(server, empty_config)) as conn:
        previous = deploy(conn, load_artifact(builds["a"]), DeployOptions(str(small_disk)))
        filled = []

        def fill(done: int, total: int, name: str) -> None:
            if not filled and done > total // 2:
                filled.append(subprocess.run(["dd", "if=/dev/zero", f"of={small_disk}/filler", "bs=64k"],
                                             capture_output=True).returncode)

        with pytest.raises(RemoteError, match=r"disk on .* is full .*while uploading .*previous deploy is untouched"):
            deploy(conn, load_artifact(builds["b"]), DeployOptions(str(small_disk), progress=fill))
        assert current_target(small_disk) == posixpath.basename(previous.remote_dir)
        assert not list(small_disk.glob(".tmp-*"))
        with pytest.raises(RemoteError, match="not enough disk space .* only"):
            deploy(conn, load_artifact(builds["b"]), DeployOptions(str(small_disk)))


# ---------------------------------------------------------------- runners that fail on the board

def test_crashing_runner_is_reported_with_its_signal(server, builds, empty_config, tmp_path):
    crash = with_runner(builds["a"], tmp_path / "crash", "int main(void) { *(volatile int *)0 = 1; return 0; }\n")
    proc = cli("verify", str(crash), *ssh_args(server, empty_config), "--base-dir", str(tmp_path / "board"))
    assert proc.returncode == 4
    line = error_after_status(proc)
    assert "runner on root@127.0.0.1" in line and "killed by signal 11 (SIGSEGV" in line


def test_failing_runner_is_reported_with_its_exit_status(server, builds, empty_config, tmp_path):
    failing = with_runner(builds["a"], tmp_path / "fail",
                          '#include <stdio.h>\nint main(void) { fputs("bad input\\n", stderr); return 3; }\n')
    proc = cli("profile", str(failing), *ssh_args(server, empty_config), "--base-dir", str(tmp_path / "board"))
    assert proc.returncode == 4
    assert "runner_prof on root@127.0.0.1" in error_after_status(proc)
    assert "exited with status 3: bad input" in proc.stderr


# ---------------------------------------------------------------- connection problems: one clear line each

def test_unknown_host_key_refused_with_fingerprint_then_accepted_on_request(server, builds, empty_config, tmp_path):
    known_hosts = tmp_path / "known_hosts"
    fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{server.host_key}.pub"], capture_output=True, text=True,
                                 check=True).stdout.split()[1]
    common = ["--host", "127.0.0.1", "--port", str(server.port), "-i", str(server.client_key),
              "--known-hosts", str(known_hosts), "-F", str(empty_config), "--base-dir", str(tmp_path / "board")]
    line = one_line_error(cli("deploy", str(builds["a"]), *common))
    assert "unknown host key" in line and fingerprint in line and "--accept-new-host-key" in line
    assert not known_hosts.exists() and not (tmp_path / "board").exists()

    proc = cli("deploy", str(builds["a"]), *common, "--accept-new-host-key")
    assert proc.returncode == 0, proc.stderr
    assert f"[127.0.0.1]:{server.port} ssh-ed25519" in known_hosts.read_text()
    assert cli("deploy", str(builds["a"]), *common).returncode == 0, "the accepted key is remembered"


def test_changed_host_key_refused_loudly(builds, empty_config, tmp_path):
    server = start_server(tmp_path / "sshd")
    try:
        with connect(ssh_options(server, empty_config)):
            pass
        server.restart_with_new_host_key()
        for extra in ([], ["--accept-new-host-key"]):
            line = one_line_error(cli("deploy", str(builds["a"]), *ssh_args(server, empty_config), *extra,
                                      "--base-dir", str(tmp_path / "board")))
            assert "HOST KEY CHANGED" in line and "man-in-the-middle" in line and "ssh-keygen -R" in line
        assert not (tmp_path / "board").exists()
    finally:
        server.stop()


def test_connection_refused_is_one_line(builds, empty_config):
    proc = cli("deploy", str(builds["a"]), "--host", "127.0.0.1", "--port", str(free_port()), "-F", str(empty_config))
    assert proc.returncode == 5
    assert "connection refused by 127.0.0.1" in one_line_error(proc)


def test_silent_server_times_out_in_one_line(builds, empty_config):
    listener = SilentListener()
    try:
        start = time.monotonic()
        proc = cli("deploy", str(builds["a"]), "--host", "127.0.0.1", "--port", str(listener.port),
                   "--connect-timeout", "1", "-F", str(empty_config))
        assert time.monotonic() - start < 30
    finally:
        listener.close()
    assert proc.returncode == 5
    assert "timed out after 1s" in one_line_error(proc)


def test_command_timeout_leaves_connection_usable(server, empty_config):
    with connect(ssh_options(server, empty_config)) as conn:
        start = time.monotonic()
        with pytest.raises(RemoteError, match=r"timed out after 1s"):
            conn.run(["sleep", "10"], timeout=1)
        assert time.monotonic() - start < 5
        assert conn.run(["echo", "still here"]).out == "still here\n"


def test_ssh_config_alias_supplies_hostname_port_user_and_key(server, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host robot\n  HostName 127.0.0.1\n  Port {server.port}\n  User root\n"
                      f"  IdentityFile {server.client_key}\n  UserKnownHostsFile {server.known_hosts}\n")
    with connect(SshOptions("robot", ssh_config=str(config), connect_timeout=5)) as conn:
        assert conn.label == f"root@127.0.0.1:{server.port}"
        assert conn.run(sh('printf %s "$1"', "a b 'c'")).out == "a b 'c'"


# ---------------------------------------------------------------- detect and local profile

def test_boards_detect_names_the_board_file(server, tmp_path):
    proc = cli("boards", "detect", "--host", "127.0.0.1", "--port", str(server.port), "-i", str(server.client_key),
               "--known-hosts", str(server.known_hosts))
    assert proc.returncode == 0, proc.stderr
    assert "x86_64 (64-bit userland)" in proc.stdout
    assert "board     x86_64 (boards/x86_64.toml)" in proc.stdout


def test_profile_local(builds, tmp_path):
    proc = cli("profile", str(builds["a"]), "--local", "--runs", "5", "--warmup", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    manifest_ops = json.loads((builds["a"] / "manifest.json").read_text())["ops"]
    assert report["where"] == "localhost" and report["latency_ms"]["median"] > 0
    assert [op["name"] for op in report["ops"]] == [op["name"] for op in manifest_ops]


def test_profile_needs_host_or_local(builds):
    assert "--host HOST" in one_line_error(cli("profile", str(builds["a"])))


def test_verify_here_without_host(builds):
    proc = cli("verify", str(builds["a"]))
    assert proc.returncode == 0, proc.stderr
    assert "run at localhost" in proc.stdout


def test_crashing_runner_locally_is_a_run_error(builds, tmp_path):
    crash = with_runner(builds["a"], tmp_path / "crash", "int main(void) { *(volatile int *)0 = 1; return 0; }\n")
    with pytest.raises(RunError, match="SIGSEGV"):
        from fluidml_xc.remote.verify import run_local
        run_local(load_artifact(crash), make_feeds(load_artifact(crash), None))


# ---------------------------------------------------------------- pure parts: board detection, fit, telemetry

RPI4_PROBE = """@uname
Linux 6.6.31+rpt-rpi-v8 aarch64
@long_bit
64
@model
Raspberry Pi 4 Model B Rev 1.5
@tegra
@meminfo
MemTotal:        3884360 kB
@cpuinfo
processor\t: 0
BogoMIPS\t: 108.00
CPU implementer\t: 0x41
CPU part\t: 0xd08
processor\t: 1
processor\t: 2
processor\t: 3
Model\t\t: Raspberry Pi 4 Model B Rev 1.5
"""


def test_detect_names_raspberry_pi_and_jetson_boards():
    from fluidml_xc.remote.detect import match_boards, parse_probe

    info = parse_probe(RPI4_PROBE)
    assert (info.machine, info.long_bit, info.cores) == ("aarch64", 64, 4)
    assert info.cpu.startswith("Cortex-A72")
    assert [b.name for b in match_boards(info)] == ["rpi4"]
    nano = RPI4_PROBE.replace("Raspberry Pi 4 Model B Rev 1.5", "NVIDIA Jetson Nano Developer Kit").replace(
        "@tegra\n", "@tegra\n# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64\n")
    assert [b.name for b in match_boards(parse_probe(nano))] == ["jetson-nano"]
    orin = nano.replace("NVIDIA Jetson Nano", "NVIDIA Jetson Orin Nano").replace("R32", "R36")
    assert [b.name for b in match_boards(parse_probe(orin))] == ["jetson-orin-nano"]
    pi3_32 = RPI4_PROBE.replace("aarch64", "armv7l").replace("@long_bit\n64", "@long_bit\n32").replace(
        "Raspberry Pi 4", "Raspberry Pi 3")
    assert [b.name for b in match_boards(parse_probe(pi3_32))] == ["rpi3"]
    unknown = parse_probe(RPI4_PROBE.replace("Raspberry Pi 4 Model B", "Acme Board"))
    assert match_boards(unknown) == []


def test_fit_refuses_wrong_userland_and_missing_emulator(builds):
    from fluidml_xc.remote.fit import BoardFacts, plan_run

    artifact = load_artifact(builds["a"])
    assert plan_run(artifact, BoardFacts("aarch64", 64, None, frozenset()), "b").emulator == ""
    with pytest.raises(RemoteError, match="32-bit userland on aarch64 but the artifact is 64-bit"):
        plan_run(artifact, BoardFacts("aarch64", 32, None, frozenset()), "b")
    with pytest.raises(RemoteError, match="qemu-aarch64-static, which is not installed"):
        plan_run(artifact, BoardFacts("x86_64", 64, None, frozenset()), "b")
    plan = plan_run(artifact, BoardFacts("x86_64", 64, None, frozenset({"qemu-aarch64-static", "timeout"})), "b")
    assert plan.argv("/x/runner", ["--bench", "1"]) == ["qemu-aarch64-static", "/x/runner", "--bench", "1"]


def test_throttle_flags_decoded():
    from fluidml_xc.remote.telemetry import decode_throttled

    assert decode_throttled(0) == []
    assert decode_throttled(0x50005) == ["under-voltage now", "throttled now", "under-voltage occurred",
                                         "throttling occurred"]
