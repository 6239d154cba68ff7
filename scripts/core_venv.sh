# Sourced by check_core_install.sh and check_core_runtime.sh (WORK, CORE, REPO and REUSE set):
# the environment of the checks, the work folder, and the core venv: a fresh one with
# `pip install demitasse` and no extras, or with REUSE=1 an existing one with only demitasse
# reinstalled. pip_core installs into it, its warnings in $WORK/pip.log, shown when pip fails.
export HF_HUB_OFFLINE=1 DEMITASSE_CACHE=$WORK/cache DEMITASSE_QUIET=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$WORK"
echo "work folder: $WORK"
pip_core() {  # the build's warnings go to a log, shown when pip fails
    "$CORE/bin/pip" install -q "$@" >>"$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log"; exit 1; }
}
if [[ $REUSE == 1 && -x $CORE/bin/python ]]; then
    pip_core --no-deps --force-reinstall "$REPO"
else
    rm -rf "$CORE"
    python3.11 -m venv "$CORE"
    pip_core "$REPO"
fi
