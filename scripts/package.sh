#!/usr/bin/env bash
# Builds the Debian package target/debian/ftnet_<version>_<arch>.deb with dpkg-deb from the
# release build and packaging/ (units, example configuration, keepalived, health check,
# maintainer scripts). Man pages and completions are made by the binary itself (`ftnet
# generate`). Prints the package's path on its last line.
#
# Usage: scripts/package.sh [--no-build] [--bin-dir DIR] [--out DIR]
#   --no-build    use the binaries as they are (default: cargo build --release --locked first)
#   --bin-dir     where ftnet and libftnet_shim.so are (default: $CARGO_TARGET_DIR/release)
#   --out         where the .deb goes (default: $CARGO_TARGET_DIR/debian)
# Needs dpkg-deb, gzip and objdump (binutils); strips debug information when strip is there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
target_dir=${CARGO_TARGET_DIR:-$REPO/target}
build=1 bin_dir=$target_dir/release out=$target_dir/debian
while (($#)); do
	case $1 in
	--no-build) build=0 ;;
	--bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift ;;
	--out) out=${2:?--out needs a directory}; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "package.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done
for tool in dpkg-deb gzip objdump; do
	command -v "$tool" >/dev/null || { echo "package.sh: $tool is missing (apt-get install dpkg-dev binutils)" >&2; exit 1; }
done
if ((build)); then
	cargo build --release --locked --workspace
fi
ftnet=$bin_dir/ftnet shim=$bin_dir/libftnet_shim.so
for f in "$ftnet" "$shim"; do
	[[ -f $f ]] || { echo "package.sh: no $f (cargo build --release --locked --workspace)" >&2; exit 1; }
done

version=$("$ftnet" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
mkdir -p "$out"
root=$(mktemp -d "$out/root.XXXXXX")
chmod 755 "$root"
trap 'rm -rf "$root"' EXIT
P=$REPO/packaging

# Binaries: debug information stripped (the build keeps it for backtraces).
install -D -m 755 "$ftnet" "$root/usr/bin/ftnet"
install -D -m 644 "$shim" "$root/usr/lib/ftnet/libftnet_shim.so"
if command -v strip >/dev/null; then
	strip --strip-debug "$root/usr/bin/ftnet" "$root/usr/lib/ftnet/libftnet_shim.so"
fi
install -D -m 755 "$P/check-router" "$root/usr/lib/ftnet/check-router"

# systemd units, their defaults, the example configuration (conffiles).
install -D -m 644 "$P/systemd/ftnet-router.service" "$root/lib/systemd/system/ftnet-router.service"
install -D -m 644 "$P/systemd/ftnet-agent.service" "$root/lib/systemd/system/ftnet-agent.service"
install -D -m 644 "$P/default/ftnet-router" "$root/etc/default/ftnet-router"
install -D -m 644 "$P/default/ftnet-agent" "$root/etc/default/ftnet-agent"
install -D -m 644 "$P/ftnet.toml" "$root/etc/ftnet/ftnet.toml"
install -D -m 644 "$P/keepalived.conf" "$root/etc/ftnet/keepalived.conf"

# Man pages (one per command) and completions, from the binary's own command definitions.
man=$root/usr/share/man/man1
"$ftnet" generate man "$man" >/dev/null
gzip -9n "$man"/*.1
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
	"$root/usr/share/fish/vendor_completions.d"
"$ftnet" generate completions bash >"$root/usr/share/bash-completion/completions/ftnet"
"$ftnet" generate completions zsh >"$root/usr/share/zsh/vendor-completions/_ftnet"
"$ftnet" generate completions fish >"$root/usr/share/fish/vendor_completions.d/ftnet.fish"

install -D -m 644 "$P/debian/copyright" "$root/usr/share/doc/ftnet/copyright"
install -m 644 README.md "$root/usr/share/doc/ftnet/README.md"
gzip -9n "$root/usr/share/doc/ftnet/README.md"

# Control data. libc6's version: the newest GLIBC_x.y symbol version the binaries use.
install -d "$root/DEBIAN"
glibc=$(objdump -T "$root/usr/bin/ftnet" "$root/usr/lib/ftnet/libftnet_shim.so" |
	grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
depends="libc6 (>= $glibc), libgcc-s1, iproute2"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@INSTALLED_SIZE@/$size/" \
	-e "s/@DEPENDS@/$depends/" "$P/debian/control.in" >"$root/DEBIAN/control"
install -m 644 "$P/debian/conffiles" "$root/DEBIAN/conffiles"
install -m 755 "$P/debian/postinst" "$P/debian/prerm" "$P/debian/postrm" "$root/DEBIAN/"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 644 "$root/DEBIAN/md5sums"

# Timestamps from the last commit, so that the same tree gives the same package.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
deb=$out/ftnet_${version}_$arch.deb
dpkg-deb --build --root-owner-group -Zxz "$root" "$deb" >/dev/null
echo "package.sh: $(du -h "$deb" | cut -f1) ftnet $version ($arch), depends: $depends" >&2
echo "$deb"
