#!/usr/bin/env bash
# Install one npm package, at an exact version, into its own folder .tools/DIR/ (git-ignored)
# with its own package.json, using npm only; idempotent (when that version is installed
# and FILE exists, it only says so). The install-*.sh scripts that need one package call it:
#   scripts/npm-into-tools.sh DIR PACKAGE VERSION FILE
# FILE: a file of the package that must exist once installed, relative to the package's
# folder (e.g. dist/index.js). Prints where the package is. Override: NPM (the npm command).
set -euo pipefail

if [[ $# -ne 4 ]]; then
    echo "usage: $0 DIR PACKAGE VERSION FILE" >&2
    exit 2
fi
dir="$1" package="$2" version="$3" file="$4"
NPM="${NPM:-npm}"

install_dir="$(cd "$(dirname "$0")/.." && pwd)/.tools/$dir"
folder="$install_dir/node_modules/$package"
manifest="$folder/package.json"

# The "version" field of the installed package's package.json, or nothing.
installed_version() {
    [[ -f "$manifest" ]] || return 0
    sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
}

if [[ "$(installed_version)" == "$version" && -e "$folder/$file" ]]; then
    echo "npm-into-tools: $package $version already installed"
else
    mkdir -p "$install_dir"
    if [[ ! -f "$install_dir/package.json" ]]; then
        printf '{\n  "name": "mcp-resume-proxy-%s",\n  "private": true\n}\n' "$dir" \
            >"$install_dir/package.json"
    fi
    "$NPM" install --prefix "$install_dir" --save-exact --no-audit --no-fund \
        --loglevel=error "$package@$version"
fi
echo "npm-into-tools: $package $(installed_version) at $folder"
