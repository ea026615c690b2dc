"""Ansible action `fluidml_xc_profile`: profile a fluidml-xc build on the host (deployed first if missing).

Arguments: those of fluidml_xc_deploy, plus runs (default 100), warmup (10), timeout (seconds), threads
(the runner's --threads; default: the count the build was made for). Returns
`profile` (what `fluidml-xc profile --json` writes) and sets it as the host fact `fluidml_xc_profile`.
In check mode nothing runs (a profile has to run the model).
"""
from __future__ import annotations

from ansible.plugins.action import ActionBase

from fluidml_xc.fleet.ansible_plugins.common import COMMON_ARGS, artifact_for_host, failure, host_from_vars, \
    reach_from_args
from fluidml_xc.fleet.tasks import profile_host
from fluidml_xc.remote.profile import ProfileOptions
from fluidml_xc.remote.runner import DEFAULT_RUN_TIMEOUT
from fluidml_xc.emit.threads import check_run_threads


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = COMMON_ARGS | {"runs", "warmup", "timeout", "threads"}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if self._task.check_mode:
            result.update(skipped=True, msg="check mode: a profile runs the model, so nothing was run")
            return result
        try:
            host = host_from_vars(task_vars.get("inventory_hostname"), task_vars or {}, self._templar, args.get("board"))
            artifact = artifact_for_host(args, host)
            threads = int(args["threads"]) if args.get("threads") is not None else None
            check_run_threads(artifact.manifest.threads, threads)
            options = ProfileOptions(int(args.get("runs", 100)), int(args.get("warmup", 10)),
                                     float(args.get("timeout", DEFAULT_RUN_TIMEOUT)), threads)
            outcome = profile_host(host, artifact, reach_from_args(args), options)
        except Exception as exc:  # noqa: BLE001 - every failure becomes this host's Ansible result
            result.update(failure(exc))
            return result
        profile = outcome.profile.to_dict()
        result.update(changed=not outcome.deployed["already_present"], profile=profile, deployed=outcome.deployed,
                      ansible_facts={"fluidml_xc_profile": profile}, artifact=str(artifact.path))
        return result
