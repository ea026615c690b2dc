"""A fleet of boards from an Ansible inventory: `deploy|profile|verify --inventory FILE [--limit PATTERN]`.

Modules: `inventory` (hosts and their variables, through ansible-core's InventoryManager), `builds` (one
artifact per distinct board), `tasks` (what one host does; shared with the Ansible modules), `run` (bounded
parallel workers, per-host tables, the summary), `command` (the command-line glue), `ansible` (the modules
fluidml_xc_deploy and fluidml_xc_profile for playbooks). Needs the `fleet` extra (ansible-core).
"""
