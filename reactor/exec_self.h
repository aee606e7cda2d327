// Running this process's own binary again, in place (same pid): how the
// dispatcher applies malloc tunables (malloc_tuning.h) and how an HA member
// that lost its leadership rejoins as a standby with a fresh state
// (dispatcher_main.cc).
#pragma once

namespace dispatch::reactor {

// Replaces the process image with the binary /proc/self/exe names, run with
// `argv` (argv[0] included) and the current environment. Executed through
// the binary's own path, not /proc/self/exe: the kernel names the process
// after the file executed, and operators find it (ps, pkill, systemd,
// /proc/PID/comm) as "dispatcher", not as "exe". Returns only when that
// failed (no /proc, say), with errno set.
void ExecSelf(char* const* argv);

}  // namespace dispatch::reactor
