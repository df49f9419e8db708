# Shared by the Go build scripts under tests/go (sourced, not run): a cache of built binaries keyed by the
# caller's inputs, one build at a time across concurrent callers, and publication by rename.
#   gobin_cached NAME KEY PROGRAM...   calls the caller's `build_into DIR` when the cache misses, then
#                                      prints the directory holding PROGRAM... (~/.cache/fleetd/go-bin/NAME-KEY)
# FLEETD_GO_BIN_CACHE overrides the cache root. The four newest builds of NAME are kept (other worktrees may
# be using theirs).
gobin_cached() {
  local name=$1 key=$2
  shift 2
  local programs=("$@")
  local root=${FLEETD_GO_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetd/go-bin}
  local out="$root/$name-$key"
  have_all() { local p; for p in "${programs[@]}"; do [ -x "$out/$p" ] || return 1; done; }
  if have_all; then echo "$out"; return 0; fi
  mkdir -p "$root"
  exec 9>"$root/.$name.lock"
  flock 9
  if have_all; then echo "$out"; return 0; fi
  local tmp
  tmp=$(mktemp -d "$root/.$name-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  local start
  start=$(date +%s)
  build_into "$tmp"
  echo "build.sh: built ${programs[*]} in $(( $(date +%s) - start ))s -> $out" >&2
  rm -rf "$out"
  mv "$tmp" "$out"
  trap - EXIT
  ls -1dt "$root/$name"-* 2>/dev/null | tail -n +5 | xargs -r rm -rf
  echo "$out"
}
