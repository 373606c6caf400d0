# shellcheck shell=bash
# Heavy nox sessions for .ci/run: each runs when disk and CI's time allow, is counted when it
# does not, and fails CI when it did not run although the recent commits change what it guards.
# Sourced by .ci/run (and by tests/ci/test_heavy_sh.py); defines functions and state only.
#
# Inputs: GUARDS (associative array: session -> space-separated bash patterns of the paths it
# guards, see .ci/run), NOX (command array; default python3 -m nox), CI_BUDGET_S (default 5400),
# CI_BASE (the commit the changes are counted from; default: the last commit older than a day).

NOT_RUN=()
RAN=()
: "${CI_BUDGET_S:=5400}"
if [[ -z ${NOX+set} ]]; then NOX=(python3 -m nox); fi

free_gib() {
  df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }'
}

# Room that CI itself can give back: pip's cache and the venvs of sessions already done.
free_disk() {
  python3 -m pip cache purge >/dev/null 2>&1 || true
  rm -rf "${HOME:-/root}/.cache/pip"
  local venv
  for venv in .nox/*; do
    [[ -d $venv ]] && rm -rf "$venv"
  done
  return 0
}

# The files changed since CI_BASE, one per line; prints "*" when they cannot be known (a
# shallow clone without that commit): then every guarded session counts as guarding a change.
changed_files() {
  local base=${CI_BASE:-}
  if [[ -z $base ]]; then
    base=$(git rev-list -1 --before='24 hours ago' HEAD 2>/dev/null) || base=""
    # A history younger than a day: count from the first commit.
    [[ -n $base ]] || base=$(git rev-list --max-parents=0 HEAD 2>/dev/null | tail -n 1)
  fi
  if [[ -z $base ]] || ! git diff --name-only "$base" HEAD 2>/dev/null; then
    echo "*"
  fi
}

# The changed paths that session $1 guards, one per line.
guarded_changes() {
  local session=$1 file pattern
  local -a patterns
  # -d '': the whole value (patterns may sit on several lines), split on any white space.
  read -r -d '' -a patterns <<< "${GUARDS[$session]:-}" || true
  while IFS= read -r file; do
    [[ -n $file ]] || continue
    for pattern in "${patterns[@]}"; do
      # shellcheck disable=SC2053  # the pattern is meant to glob
      if [[ $file == "*" || $file == $pattern ]]; then
        echo "$file"
        break
      fi
    done
  done <<< "$CHANGED"
  return 0  # not the last test's status: callers run under set -e
}

# heavy NAME NEED_GIB NEED_S: run `nox -s NAME` if the disk has NEED_GIB free (after freeing
# what CI can) and CI's budget has NEED_S left; otherwise record why it did not run.
heavy() {
  local name=$1 need_gib=$2 need_s=$3 free
  if (( SECONDS + need_s > CI_BUDGET_S )); then
    echo "nox -s $name not run: ${SECONDS}s of CI's ${CI_BUDGET_S}s used, it needs about ${need_s}s"
    NOT_RUN+=("$name (time)")
    return 0
  fi
  free=$(free_gib)
  if (( free < need_gib )); then
    free_disk
    free=$(free_gib)
  fi
  if (( free < need_gib )); then
    echo "nox -s $name not run: ${free} GiB free on disk, it needs about ${need_gib} GiB"
    NOT_RUN+=("$name (disk)")
    return 0
  fi
  "${NOX[@]}" -s "$name"
  RAN+=("$name")
  rm -rf ".nox/$name"
}

# The last line of CI: what ran, what did not and why; fails when a session that did not run
# guards a changed path.
ci_summary() {
  local entry name changes status=0
  CHANGED=$(changed_files)
  for entry in "${NOT_RUN[@]}"; do
    name=${entry%% *}
    changes=$(guarded_changes "$name")
    if [[ -n $changes ]]; then
      echo "nox -s $name did not run but guards what changed since ${CI_BASE:-a day ago}:"
      awk 'NR <= 10 { print "  " $0 }' <<< "$changes"
      status=1
    fi
  done
  local line="sessions run: ${RAN[*]:-none}"
  if (( ${#NOT_RUN[@]} )); then
    local joined plural=""
    joined=$(printf '%s, ' "${NOT_RUN[@]}")
    if (( ${#NOT_RUN[@]} > 1 )); then plural=s; fi
    line+="; ${#NOT_RUN[@]} session$plural not run: ${joined%, }"
  fi
  if (( status )); then
    echo "CI failed: $line"
  else
    echo "CI passed: $line"
  fi
  return "$status"
}
