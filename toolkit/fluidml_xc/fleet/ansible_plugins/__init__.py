"""Ansible modules shipped with fluidml-xc, as controller-side action plugins (the board needs no Python).

`fluidml_xc_deploy` and `fluidml_xc_profile` run in ansible-playbook's own workers (forks, retries, --limit,
check mode), reach each host with its inventory variables (ansible_host, ansible_port, ansible_user,
ansible_ssh_private_key_file, fluidml_board) over fluidml-xc's SSH, build the model once per board, and
return what happened; the profile also as the host fact `fluidml_xc_profile`. Point Ansible at them with
`ANSIBLE_ACTION_PLUGINS=$(python -m fluidml_xc.fleet.ansible_plugins)` or `action_plugins =` in ansible.cfg.
"""
from __future__ import annotations

from pathlib import Path

ACTION_PLUGINS = Path(__file__).resolve().parent / "action"
