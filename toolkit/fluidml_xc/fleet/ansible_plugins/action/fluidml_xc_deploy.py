"""Ansible action `fluidml_xc_deploy`: deploy a fluidml-xc build to the host (content-addressed, sha256-checked).

Arguments: artifact (a build directory) or model (an ONNX file, built once per fluidml_board), opt, precision
(fp32 or fp16, as build --precision), build_dir, base_dir, known_hosts, accept_new_host_key, ssh_config,
connect_timeout. Check mode reports whether the deploy would upload (changed) without changing the board. Returns `deployed` (remote_dir,
current, digest, uploaded_files, uploaded_bytes, already_present, previous, emulator).
"""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from fluidml_xc.fleet.ansible_plugins.common import COMMON_ARGS, artifact_for_host, failure, host_from_vars, \
    reach_from_args
from fluidml_xc.fleet.tasks import deploy_host, deployed_already


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = COMMON_ARGS

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        try:
            host = host_from_vars(task_vars.get("inventory_hostname"), task_vars or {}, self._templar, args.get("board"))
            artifact = artifact_for_host(args, host)
            reach = reach_from_args(args)
            if self._task.check_mode:
                present = deployed_already(host, artifact, reach)
                result.update(changed=not present, msg="already deployed" if present else "would upload",
                              artifact=str(artifact.path))
                return result
            outcome = deploy_host(host, artifact, reach)
        except Exception as exc:  # noqa: BLE001 - every failure becomes this host's Ansible result
            result.update(failure(exc))
            return result
        result.update(changed=not outcome.deployed["already_present"], deployed=outcome.deployed,
                      artifact=str(artifact.path), board=artifact.board.name, where=outcome.where)
        return result
