#!/usr/bin/env bash
# Builds hookstate once (release profile: optimised for speed, stripped, for this machine's CPU)
# and installs, under the prefix (default ~/.local):
#   bin/hookstate
#   share/bash-completion/completions/hookstate
#   share/zsh/site-functions/_hookstate
#   share/fish/vendor_completions.d/hookstate.fish
#   share/man/man1/hookstate.1
# then prints what it installed. Usage: scripts/install.sh [--prefix DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${HOME:-}/.local"
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 64; }
                  prefix="$2"; shift 2 ;;
        --prefix=*) prefix="${1#--prefix=}"; shift ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument $1 (usage: scripts/install.sh [--prefix DIR])" >&2
           exit 64 ;;
    esac
done
[ -n "$prefix" ] || { echo "install.sh: no prefix (HOME is unset): pass --prefix DIR" >&2; exit 64; }

start=$(date +%s)
cargo build --release --locked -p hookstate
built="${CARGO_TARGET_DIR:-target}/release/hookstate"

install -d "$prefix/bin" "$prefix/share/bash-completion/completions" \
    "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d" \
    "$prefix/share/man/man1"
install -m 0755 "$built" "$prefix/bin/hookstate"
"$built" completions bash > "$prefix/share/bash-completion/completions/hookstate"
"$built" completions zsh > "$prefix/share/zsh/site-functions/_hookstate"
"$built" completions fish > "$prefix/share/fish/vendor_completions.d/hookstate.fish"
"$built" man > "$prefix/share/man/man1/hookstate.1"

echo "installed in $(( $(date +%s) - start )) s:"
for file in bin/hookstate share/bash-completion/completions/hookstate \
    share/zsh/site-functions/_hookstate share/fish/vendor_completions.d/hookstate.fish \
    share/man/man1/hookstate.1; do
    printf '  %s (%s bytes)\n' "$prefix/$file" "$(wc -c < "$prefix/$file" | tr -d ' ')"
done
case ":${PATH:-}:" in
    *":$prefix/bin:"*) ;;
    *) echo "add $prefix/bin to PATH to run hookstate by name" ;;
esac
