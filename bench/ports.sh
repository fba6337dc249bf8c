# SPDX-License-Identifier: Apache-2.0
# Sourced by the bench scripts that start servers (run_forward.sh,
# run_loadgen.sh); needs $here, the bench/ directory.
#
# A port as tests/integration/harness.py's free_port gives one (below the
# kernel's ephemeral range), claimed here with flock on its file in
# DD_TEST_PORT_DIR, held on descriptor 3, 4, ... for the life of this script
# and its children, so that a test running beside it never takes it.
port_fd=3
take_port() { # sets $port
    while :; do
        port=$(/usr/bin/python3 "$here/../tests/integration/harness.py" port) || exit 1
        [ "$port_fd" -le 9 ] || { echo "$0: more than 7 ports" >&2; exit 1; }
        eval "exec $port_fd>>\"\${DD_TEST_PORT_DIR:-/tmp/dedupd-test-ports}/$port\""
        if flock -n "$port_fd"; then port_fd=$((port_fd + 1)); return 0; fi
        eval "exec $port_fd>&-"
    done
}
