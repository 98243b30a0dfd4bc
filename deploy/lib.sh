# Shared by build-image.sh and smoke.sh: the container engine and the flags this host needs.
ENGINE=${ENGINE:-podman}
IMAGE=${IMAGE:-localhost/exec-server:dev}
ENGINE_FLAGS=()
if [[ $ENGINE == podman && -n $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null) ]] && command -v runc >/dev/null; then
  # A hybrid cgroup hierarchy (v1 plus a v2 holding a controller): crun refuses it, runc not.
  ENGINE_FLAGS+=(--runtime runc)
fi
RUN_FLAGS=("${ENGINE_FLAGS[@]}")
cap_eff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
if (( (0x$cap_eff >> 24 & 1) == 0 )); then
  # Without CAP_SYS_RESOURCE the engine cannot raise a container's limits above this
  # process's hard limits (podman's defaults are nofile 1048576, nproc 4194304).
  RUN_FLAGS+=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
fi
