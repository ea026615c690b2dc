"""`python -m fluidml_xc.fleet.ansible_plugins` prints the action plugin directory for ANSIBLE_ACTION_PLUGINS."""
from . import ACTION_PLUGINS

print(ACTION_PLUGINS)
