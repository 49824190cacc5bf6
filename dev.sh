#!/usr/bin/env bash
# sigwatch's single entry point for a fresh Debian machine. Installs what it needs itself.
#   ./dev.sh run [ARGS...]    run the daemon (default configuration unless ARGS say otherwise)
#   ./dev.sh test [PYTEST...]  run the whole test suite (what CI runs)
#   ./dev.sh test-loaded [PYTEST...]  the suite RUNS times (3) while both cores are kept busy
#   ./dev.sh recall [--misses]  recall and false alarms on the real corpus (tests/corpus/real)
#   ./dev.sh package           the wheel and the .deb into dist/ (docs/deploy.md)
#   ./dev.sh bench | reliability | mutations | catalogue | coverage | venv
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}
PY="$VENV/bin/python"

need_debian_packages() {
  local missing=()
  python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  command -v python3 >/dev/null || missing+=(python3)
  if ((${#missing[@]})); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    else
      echo "dev.sh: please install: ${missing[*]} (sudo apt-get install ${missing[*]})" >&2
      exit 1
    fi
  fi
}

venv() {
  local stamp="$VENV/.installed"
  if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
    return
  fi
  need_debian_packages
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install --quiet --upgrade pip
  "$PY" -m pip install --quiet -e '.[test]'
  touch "$stamp"
}

cmd=${1:-help}
shift || true
case "$cmd" in
  venv) venv ;;
  run)
    venv
    mkdir -p /var/log/training 2>/dev/null || true
    exec "$VENV/bin/sigwatch" run "$@" ;;
  test)
    venv
    exec "$PY" -m pytest -q -p no:cacheprovider "$@" ;;
  test-loaded)
    # The suite must pass on a busy machine: stress-ng (Debian) keeps every core busy while
    # it runs RUNS times in a row; each run's result and duration are printed.
    venv
    runs=${RUNS:-3}
    command -v stress-ng >/dev/null || { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
      && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
         stress-ng >/dev/null 2>&1; } || true
    load=()
    if command -v stress-ng >/dev/null; then
      stress-ng --cpu "$(nproc)" --quiet & load+=($!)
    else  # two busy loops per core would do as well
      for _ in $(seq "$(nproc)"); do yes >/dev/null & load+=($!); done
    fi
    trap 'kill "${load[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
    failed=0
    for run in $(seq "$runs"); do
      start=$(date +%s)
      if "$PY" -m pytest -q -p no:cacheprovider "$@"; then result=passed; else result=FAILED; failed=1; fi
      echo "dev.sh: loaded run $run/$runs $result in $(( $(date +%s) - start )) s" \
           "(load average $(cut -d' ' -f1-3 /proc/loadavg))"
    done
    exit $failed ;;
  bench) venv; exec "$PY" bench/run_bench.py "$@" ;;
  reliability) venv; exec "$PY" bench/reliability.py "$@" ;;
  mutations) venv; exec "$PY" bench/mutations.py "$@" ;;
  recall) venv; exec "$PY" bench/recall.py "$@" ;;
  coverage) venv; exec "$PY" bench/coverage.py --write ;;
  package)
    # The wheel (as `python -m build --wheel` would), then the .deb: a self-contained
    # virtualenv under /opt/sigwatch made with Debian's python3, the unit, the config, logrotate.
    venv
    command -v dpkg-deb >/dev/null || { echo "dev.sh: dpkg-deb is missing (apt-get install dpkg)" >&2; exit 1; }
    dist=${DIST:-dist}
    mkdir -p "$dist"
    rm -f "$dist"/sigwatch-*.whl "$dist"/sigwatch_*.deb
    "$PY" -m pip wheel --quiet --no-deps --wheel-dir "$dist" .
    wheel=$(ls "$dist"/sigwatch-*.whl)
    /usr/bin/python3 deploy/debian/build_deb.py --wheel "$wheel" --out "$dist" "$@"
    ls -l "$dist" ;;
  catalogue) venv; "$VENV/bin/sigwatch" patterns catalogue > patterns/README.md ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
