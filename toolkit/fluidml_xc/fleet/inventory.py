"""Hosts from a standard Ansible inventory (INI or YAML), read with ansible-core's own InventoryManager."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..extras import require


@dataclass(frozen=True)
class FleetHost:
    """One inventory host as fluidml-xc reaches it (None: the command line's value, then ~/.ssh/config)."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    identity: str | None = None
    board: str | None = None
    base_dir: str | None = None
    known_hosts: str | None = None

    def board_name(self, default: str | None = None) -> str:
        """The board file this host is (fluidml_board, else `default`), by its canonical name."""
        from ..target.boards import get_board

        return get_board(self.board or default).name


HOST_VARS = {
    "address": "ansible_host", "port": "ansible_port", "user": "ansible_user",
    "identity": "ansible_ssh_private_key_file", "board": "fluidml_board", "base_dir": "fluidml_base_dir",
    "known_hosts": "fluidml_known_hosts",
}
"""FleetHost field -> the inventory variable that sets it."""
ALIASES = {"ansible_port": ("ansible_ssh_port",), "ansible_user": ("ansible_ssh_user",),
           "ansible_host": ("ansible_ssh_host",), "ansible_ssh_private_key_file": ("ansible_private_key_file",)}


@contextlib.contextmanager
def _quiet_ansible(messages: list[str]):
    """Collect ansible's warnings (parse failures) instead of printing them; we report one line."""
    from ansible.utils.display import Display

    display = Display()
    saved = {name: display.__dict__.get(name) for name in ("warning", "error_as_warning")}

    def warning(msg="", *args, **kwargs):
        messages.append(str(msg))

    def error_as_warning(msg=None, exception=None, *args, **kwargs):
        cause = str(exception).strip().splitlines()[0] if exception is not None and str(exception).strip() else ""
        messages.append(f"{msg or ''} {cause}".strip())

    display.warning, display.error_as_warning = warning, error_as_warning
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                display.__dict__.pop(name, None)
            else:
                display.__dict__[name] = value


def _value(variables: dict, key: str, templar):
    for name in (key, *ALIASES.get(key, ())):
        value = variables.get(name)
        if value is not None:
            if isinstance(value, str) and "{{" in value and templar is not None:
                value = templar.template(value)
            return value
    return None


def load_inventory(path: str | Path, limit: str | None = None) -> list[FleetHost]:
    """The hosts of an Ansible inventory file (after --limit), with their connection and board variables."""
    require("ansible", "fleet", "--inventory")
    from ansible import constants as C
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    path = Path(path)
    if not path.exists():
        raise InputError(f"inventory {str(path)!r} does not exist: pass an Ansible inventory file (INI or YAML)")
    loader = DataLoader()
    messages: list[str] = []
    C.INVENTORY_UNPARSED_IS_FAILED = True
    with _quiet_ansible(messages):
        try:
            inventory = InventoryManager(loader=loader, sources=[str(path)])
        except AnsibleError:
            detail = next((m for m in messages if "caused by" not in m and m.startswith("Failed to parse")), "")
            raise InputError(f"inventory {str(path)!r} is not a valid Ansible inventory (INI or YAML)"
                             + (f": {detail}" if detail else "")) from None
        if limit:
            inventory.subset(limit)
        hosts = inventory.get_hosts("all")
    if not hosts:
        raise InputError(f"no hosts in inventory {str(path)!r}" + (f" match --limit {limit!r}" if limit else "")
                         + ": check the host patterns")
    manager = VariableManager(loader=loader, inventory=inventory)
    out = []
    for host in hosts:
        variables = manager.get_vars(host=host, include_hostvars=False)
        templar = Templar(loader=loader, variables=variables)
        values = {field: _value(variables, var, templar) for field, var in HOST_VARS.items()}
        port = values["port"]
        if port is not None:
            try:
                port = int(port)
            except (TypeError, ValueError):
                raise InputError(f"inventory host {host.name!r}: ansible_port {port!r} is not a TCP port") from None
            if not 0 < port < 65536:
                raise InputError(f"inventory host {host.name!r}: ansible_port {port} is not a valid TCP port")
        out.append(FleetHost(
            name=host.name, address=str(values["address"] or host.name), port=port,
            user=str(values["user"]) if values["user"] else None,
            identity=str(Path(str(values["identity"])).expanduser()) if values["identity"] else None,
            board=str(values["board"]) if values["board"] else None,
            base_dir=str(values["base_dir"]) if values["base_dir"] else None,
            known_hosts=str(Path(str(values["known_hosts"])).expanduser()) if values["known_hosts"] else None))
    return out
