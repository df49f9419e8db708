# Sourced by the venv installers under tests/scripts (not run): `find_python` prints the newest pyenv
# Python $PYTHON_VERSION.x, else python$PYTHON_VERSION on PATH; otherwise it calls the caller's `die`.
find_python() {
  local p
  if command -v pyenv >/dev/null 2>&1 || [ -x "$HOME/.pyenv/bin/pyenv" ]; then
    local root; root="$(PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}" "${PYENV:-$(command -v pyenv || echo "$HOME/.pyenv/bin/pyenv")}" root)"
    p="$(ls -d "$root"/versions/"$PYTHON_VERSION"*/bin/python3 2>/dev/null | sort -V | tail -1 || true)"
    [ -n "$p" ] && [ -x "$p" ] && { echo "$p"; return; }
  fi
  p="$(command -v "python$PYTHON_VERSION" || true)"
  [ -n "$p" ] && { echo "$p"; return; }
  die "Python $PYTHON_VERSION not found (pyenv versions / python$PYTHON_VERSION)"
}
