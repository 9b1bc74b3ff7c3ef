#!/bin/sh
# OpenMPI's rsh agent for tests/e2e/test_multi_host.py: mpirun runs `AGENT HOST COMMAND...` to
# start its daemon on HOST; here each "machine" is a network namespace, and CPC_NETNS_HOSTS
# ("ADDRESS=NAMESPACE ...") says which one plays HOST.
host=$1
shift
for pair in $CPC_NETNS_HOSTS; do
  if [ "${pair%%=*}" = "$host" ]; then
    [ -n "$CPC_NETNS_LOG" ] && echo "$host ${pair#*=}" >> "$CPC_NETNS_LOG"
    exec ip netns exec "${pair#*=}" /bin/sh -c "$*"
  fi
done
echo "netns_rsh_agent.sh: no namespace plays host '$host' (CPC_NETNS_HOSTS='$CPC_NETNS_HOSTS')" >&2
exit 255
