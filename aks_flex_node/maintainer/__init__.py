"""The Debian glue: what the maintainer scripts run (maintscript.py: render-config, join,
unjoin), the debconf channel and progress bar (debconf_channel.py), questions to
configuration keys (debconf_answers.py), and the files they inspect before use
(node_files.py). The join logic itself is lifecycle.py's."""
