"""Role processes: how a run's roles start, live and end.

    launch.py     launch(): one process per role in its namespace, the watchdog, teardown
    spawn.py      how a role starts: forked from the warm launcher + setns (default) or ip netns exec
    supervise.py  the parent's side: heartbeats, hang and death detection, stop
    role.py       the child's side: join the process group, build the RoleContext, run the entry
    selftest.py   a role entry that exercises the cluster itself (probes, exchanges), for the tests
                  and benchmarks; it stays in the package because a role imports its entry by
                  module name in a fresh interpreter (NARROWBAND_SPAWN=exec), which cannot see tests/

Import the module you need (``from harness.cluster.launch import launch``): this file imports
nothing, so a role process that only needs ``role`` does not load the launcher.
"""
