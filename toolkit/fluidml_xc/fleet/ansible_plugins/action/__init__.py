"""Ansible action plugins (a directory for ANSIBLE_ACTION_PLUGINS; a package only so wheels ship it)."""
