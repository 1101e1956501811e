#!/usr/bin/env bash
# Builds the book (docs/book/index.html) with mdBook, installed from crates.io when missing.
#
#   bash docs/build.sh            build
#   bash docs/build.sh serve      serve it on http://127.0.0.1:3000 with live reload
#
# Internal links are checked by the test suite (tests/integration/maps.rs), which needs no
# mdBook; this script fails when mdBook cannot build a chapter.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$HOME/.cargo/bin:$PATH"
MDBOOK_VERSION="0.5.4"
if ! command -v mdbook >/dev/null 2>&1 || ! mdbook --version | grep -q "v$MDBOOK_VERSION"; then
    echo "installing mdbook $MDBOOK_VERSION from crates.io"
    cargo install mdbook --version "$MDBOOK_VERSION" --locked --quiet
fi
if [ "${1:-build}" = "serve" ]; then
    exec mdbook serve --hostname 127.0.0.1
fi
mdbook build
echo "the book: $(pwd)/book/index.html"
