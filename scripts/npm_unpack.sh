# Sourced by the fetch scripts: npm_unpack PACKAGE DIR downloads PACKAGE (name@version) from
# the npm registry with `npm pack` into DIR and extracts it there (DIR/package/...). Calls the
# caller's die() on any failure.
npm_unpack() {
  local package="$1" dir="$2" tarball
  command -v npm >/dev/null || die "npm not found (apt-get install npm)"
  command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
  (cd "$dir" && npm pack --silent "$package" >/dev/null) || die "npm pack $package failed"
  tarball="$(ls "$dir"/*.tgz 2>/dev/null | head -n1)"
  [[ -n "$tarball" ]] || die "npm pack $package produced no tarball"
  tar -xzf "$tarball" -C "$dir" || die "cannot extract $tarball"
}
