#!/usr/bin/env bash
# build.sh — the one entry point.
#   ./build.sh            build bin/chubbyd and bin/chubbyfs
#   ./build.sh gen        regenerate gen/ from idl/ with the pinned Kitex generator, and
#                         gen/apachethrift/ from idl/chubby.thrift with Apache Thrift's Go
#                         generator (Debian's thrift-compiler 0.17.0, for the interop test)
#   ./build.sh test       the whole check: gofmt, go vet, gen/ up to date, go test -race ./...
#                         (installs Debian's thrift-compiler, python3-thrift, iproute2 and the Java
#                         build's packages if missing; the network-namespace tests need root and skip
#                         without it)
#   ./build.sh bench      chubbybench: our cell against etcd, ZooKeeper and Redis on this machine
#                         (installs them if missing; --quick: under 3 minutes; flags: ./build.sh bench --help)
#                         ./build.sh bench avail: availability (idle CPU and view changes with and without
#                         a CPU hog, failover after kill -9 and SIGSTOP; ~2½ h, --quick ~20 min;
#                         flags: ./build.sh bench avail --help)
#   ./build.sh sim        the deterministic simulator over more seeds: ./build.sh sim --seeds 100000
#                         [--seedbase N] (one seed: --seed N --simtrace; default suite: 1000 seeds)
#   ./build.sh python     generate the Python client library's Thrift modules from idl/chubby.thrift
#                         (Debian's thrift-compiler, into client/python/chubbycell/_thrift, not
#                         committed; installs thrift-compiler and python3-thrift if missing); then
#                         PYTHONPATH=client/python /usr/bin/python3 -c 'import chubbycell' works
#                         (or pip install it, whose build generates them: client/python/README.md).
#                         Its tests: go test ./client/python (part of ./build.sh test)
#   ./build.sh java       the Java client library: client/java/build/chubbycell.jar (Java generated
#                         from idl/ by Debian's thrift, compiled with javac against libthrift-java;
#                         installs the JDK, thrift-compiler and libthrift-java if missing), and the
#                         example and test runner in client/java/build/test-classes
#   ./build.sh help       this text
set -euo pipefail
cd "$(dirname "$0")"

MODULE=$(go list -m)

gen() {
	rm -rf gen
	mkdir -p gen
	# fsm.thrift includes chubby.thrift; chubby.thrift goes last so that its
	# package (with the combined service all four services are served by) is
	# the one that stays.
	local log
	log=$(mktemp)
	if ! { go tool kitex -module "$MODULE" -gen-path gen idl/rpctest.thrift &&
		go tool kitex -module "$MODULE" -gen-path gen idl/replica.thrift &&
		go tool kitex -module "$MODULE" -gen-path gen idl/fsm.thrift &&
		go tool kitex -module "$MODULE" -gen-path gen -combine-service idl/chubby.thrift &&
		gen_apachethrift; } >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		return 1
	fi
	rm -f "$log"
	gofmt -w gen
	echo "gen/ regenerated from idl/"
}

# gen_apachethrift writes the client-facing interface as the Apache Thrift
# compiler's Go generator makes it (on github.com/apache/thrift, not Kitex)
# into gen/apachethrift/chubby, for tools/interop's Go client. The compiler
# must be the version go.mod pins the library at, so that the two match and
# the output (which names the compiler's version) is the same everywhere.
# skip_remote: no <service>-remote main programs.
APACHE_THRIFT_VERSION=0.17.0
gen_apachethrift() {
	local thrift version
	if ! thrift=$(command -v thrift); then
		echo "gen: the Apache Thrift compiler is missing (apt-get install thrift-compiler)"
		return 1
	fi
	version=$("$thrift" --version)
	if [ "$version" != "Thrift version $APACHE_THRIFT_VERSION" ]; then
		echo "gen: $thrift is \"$version\"; gen/apachethrift needs Thrift version $APACHE_THRIFT_VERSION (as github.com/apache/thrift in go.mod)"
		return 1
	fi
	mkdir -p gen/apachethrift
	"$thrift" --gen "go:package_prefix=$MODULE/gen/apachethrift/,thrift_import=github.com/apache/thrift/lib/go/thrift,skip_remote" \
		-out gen/apachethrift idl/chubby.thrift
}

build() {
	mkdir -p bin
	# --version names the commit: the go command records it itself, but
	# not with -buildvcs=false nor in a git worktree, so pass it too.
	local ldflags=() rev modified=false
	if rev=$(git rev-parse HEAD 2>/dev/null); then
		[ -z "$(git status --porcelain 2>/dev/null)" ] || modified=true
		ldflags=(-ldflags "-X $MODULE/cell/version.commit=$rev -X $MODULE/cell/version.modified=$modified")
	fi
	go build "${ldflags[@]}" -o bin/ ./tools/chubbyd ./tools/chubbyfs
	echo "built: bin/chubbyd bin/chubbyfs"
}

check_gen() {
	local saved
	saved=$(mktemp -d)
	cp -a gen "$saved/gen"
	gen >/dev/null
	if ! diff -r "$saved/gen" gen >/dev/null; then
		echo "FAIL: gen/ differs from what ./build.sh gen produces (regenerated now; review and commit it)" >&2
		diff -r "$saved/gen" gen | head -20 >&2 || true
		rm -rf "$saved"
		return 1
	fi
	rm -rf "$saved"
	echo "ok: gen/ is what ./build.sh gen produces"
}

# apt_install WHAT PACKAGE... installs the Debian packages given (the ones
# found missing) for WHAT ("the tests"), as root only.
apt_install() {
	local what=$1
	shift
	if [ $# -eq 0 ]; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "FAIL: $what need Debian's $*; install them as root" >&2
		return 1
	fi
	echo "installing $* for $what..." >&2
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null
}

# python_deps lists the Debian packages missing for the Python client:
# the Apache Thrift compiler and Debian's python3 with its Thrift library,
# and what its install test (a pip install into a venv, no package index)
# builds with: setuptools, wheel and venv (with its bundled pip).
python_deps() {
	command -v thrift >/dev/null || echo thrift-compiler
	[ -x /usr/bin/python3 ] || echo python3
	/usr/bin/python3 -c 'import thrift' 2>/dev/null || echo python3-thrift
	/usr/bin/python3 -c 'import setuptools' 2>/dev/null || echo python3-setuptools
	/usr/bin/python3 -c 'import wheel' 2>/dev/null || echo python3-wheel
	/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || echo python3-venv
}

# The Java client library's build (./build.sh java) uses Debian's packages:
# javac and jar from the JDK, the thrift compiler, the Apache Thrift Java
# library and slf4j (its logging API; slf4j-nop silences it at run time).
JAVA_DEPS_DIR=/usr/share/java
JAVA_CP="$JAVA_DEPS_DIR/thrift.jar:$JAVA_DEPS_DIR/slf4j-api.jar"
JAVA_RUNTIME_CP="$JAVA_CP:$JAVA_DEPS_DIR/slf4j-nop.jar"

# java_missing prints the Debian packages the Java build needs that are missing.
java_missing() {
	{ command -v javac >/dev/null && command -v jar >/dev/null; } || echo openjdk-17-jdk-headless
	command -v thrift >/dev/null || echo thrift-compiler
	[ -f "$JAVA_DEPS_DIR/thrift.jar" ] || echo libthrift-java
	{ [ -f "$JAVA_DEPS_DIR/slf4j-api.jar" ] && [ -f "$JAVA_DEPS_DIR/slf4j-nop.jar" ]; } || echo libslf4j-java
}

# test_deps installs what the tests need beyond Go: the Apache Thrift
# compiler and Python library for the cross-language test and the Python
# client library's tests (client/python), what the Java client's build
# needs (java_missing) for its test (client/java), and iproute2 and
# util-linux (ip netns, prlimit) for the network-namespace tests (Debian
# packages).
test_deps() {
	local missing
	mapfile -t missing < <({ python_deps && java_missing; } | sort -u)
	command -v ip >/dev/null || missing+=(iproute2)
	command -v prlimit >/dev/null || missing+=(util-linux)
	apt_install "the tests" "${missing[@]}"
}

# python_gen generates the Thrift modules of the Python client library,
# chubbycell, from idl/chubby.thrift with Debian's thrift compiler: the
# IDL's Python namespace (chubby) lands in client/python/chubbycell/_thrift
# (.gitignore'd), so the library imports it as chubbycell._thrift.chubby —
# inside its own package, clashing with no other module named chubby. The
# compiler's *-remote scripts (command-line tools importing a top-level
# chubby) are left out. The new tree replaces the old one by a rename.
python_gen() {
	local missing
	mapfile -t missing < <(python_deps)
	apt_install "the Python client" "${missing[@]}"
	local pkg=client/python/chubbycell out=client/python/chubbycell/_thrift tmp
	tmp=$(mktemp -d "$pkg/.thrift-gen.XXXXXX")
	if ! thrift --gen py -out "$tmp" idl/chubby.thrift; then
		rm -rf "$tmp"
		return 1
	fi
	rm -f "$tmp"/chubby/*-remote
	chmod 755 "$tmp"
	rm -rf "$out"
	mv "$tmp" "$out"
	PYTHONPATH="$out" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c \
		'from chubby import Session, FileSystem, Lock, Cell, Oracle, ttypes, constants' ||
		{ echo "FAIL: the generated modules do not import" >&2; return 1; }
	echo "generated $out from idl/chubby.thrift ($(thrift --version))"
}

# java builds the Java client library into client/java/build (not
# committed): the Java that Debian's thrift compiler generates from
# idl/chubby.thrift (package chubby) and the library (client/java/src)
# compiled against Debian's libthrift-java, in chubbycell.jar; the example
# and the Java test runner compiled against it, in test-classes; and
# classpath, the runtime class path of both. The generated code is compiled
# again only when its inputs change (the IDL, the compiler, the Thrift
# jar: gen.stamp), as javac takes long over it; the rest is built anew
# every time.
java_build() {
	# shellcheck disable=SC2046 # java_missing prints package names, one a line
	apt_install "the Java build" $(java_missing)
	local out=client/java/build stamp
	mkdir -p "$out"
	stamp=$({ thrift --version && sha256sum idl/chubby.thrift "$JAVA_DEPS_DIR/thrift.jar" && javac -version 2>&1; } | sha256sum)
	if [ ! -f "$out/gen.stamp" ] || [ "$(cat "$out/gen.stamp")" != "$stamp" ]; then
		rm -rf "$out/gen-java" "$out/gen-classes" "$out/gen.stamp"
		mkdir -p "$out/gen-java" "$out/gen-classes"
		thrift --gen java:generated_annotations=suppress -out "$out/gen-java" idl/chubby.thrift
		# shellcheck disable=SC2046 # word splitting of the file list is meant
		javac --release 17 -encoding UTF-8 -nowarn -cp "$JAVA_CP" -d "$out/gen-classes" \
			$(find "$out/gen-java" -name '*.java' | sort)
		echo "$stamp" >"$out/gen.stamp"
	fi
	rm -rf "$out/classes" "$out/test-classes" "$out/chubbycell.jar" "$out/classpath"
	mkdir -p "$out/classes" "$out/test-classes"
	# Lint warnings fail the build, and doclint checks the public API's
	# documentation.
	# shellcheck disable=SC2046
	javac --release 17 -encoding UTF-8 -Xlint:all,-path -Werror \
		-Xdoclint:all/protected -Xdoclint/package:io.chubby.cell \
		-cp "$out/gen-classes:$JAVA_CP" -d "$out/classes" $(find client/java/src -name '*.java' | sort)
	jar --create --file "$out/chubbycell.jar" -C "$out/gen-classes" . -C "$out/classes" .
	# shellcheck disable=SC2046
	javac --release 17 -encoding UTF-8 -Xlint:all,-path -Werror \
		-cp "$out/chubbycell.jar:$JAVA_CP" -d "$out/test-classes" \
		$(find client/java/examples client/java/test -name '*.java' | sort)
	echo "$PWD/$out/chubbycell.jar:$JAVA_RUNTIME_CP" >"$out/classpath"
	echo "built: $out/chubbycell.jar (run with -cp $(cat "$out/classpath"))"
}

test_all() {
	test_deps
	local bad
	bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go') 2>/dev/null || true)
	if [ -n "$bad" ]; then
		echo "FAIL: gofmt needed on:" >&2
		echo "$bad" >&2
		return 1
	fi
	echo "ok: gofmt"
	go vet ./...
	echo "ok: go vet"
	check_gen
	# -timeout is per package: the longest (cell/sim, fs) take 5-10 min
	# alone and up to 16 min on a machine busy with other work.
	go test -race -count=1 -timeout 30m ./...
}

# bench_deps installs the systems chubbybench compares the cell with, from
# Debian's packages, when they are missing: etcd-server, zookeeper (with
# slf4j-simple for its logs; chubbybench starts it with java directly, never
# as a service) and redis-server.
bench_deps() {
	local missing=()
	command -v etcd >/dev/null || missing+=(etcd-server)
	{ command -v java >/dev/null && [ -f /usr/share/java/zookeeper.jar ]; } || missing+=(zookeeper)
	[ -f /usr/share/java/slf4j-simple.jar ] || missing+=(libslf4j-java)
	command -v redis-server >/dev/null || missing+=(redis-server)
	if [ ${#missing[@]} -eq 0 ]; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "FAIL: the benchmarks need Debian's ${missing[*]}; install them as root" >&2
		return 1
	fi
	echo "installing ${missing[*]} for the benchmarks..." >&2
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	# RUNLEVEL=1: do not start the packages' own services; chubbybench starts its own.
	RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
}

# bench builds chubbyd, chubbyd-pprof (chubbyd plus net/http/pprof, added
# with go build -overlay from tools/chubbybench/chubbyd_pprof.go.in, for the
# profiles) and chubbybench, and runs chubbybench with the flags given
# (`bench avail ...`: chubbybench avail, the availability run). It stops
# every server it started, also on Ctrl-C and on failure.
bench() {
	case " $* " in
	*" -h "* | *" --help "*) ;;
	*) bench_deps ;;
	esac
	build >&2
	go build -o bin/ ./tools/chubbybench
	if [ "${1:-}" = avail ]; then # the availability run: no profiles, so no chubbyd-pprof
		shift
		exec bin/chubbybench avail --chubbyd bin/chubbyd "$@"
	fi
	local overlay
	overlay=$(mktemp)
	printf '{"Replace":{"%s/tools/chubbyd/zz_chubbybench_pprof.go":"%s/tools/chubbybench/chubbyd_pprof.go.in"}}\n' "$PWD" "$PWD" >"$overlay"
	if ! go build -overlay "$overlay" -o bin/chubbyd-pprof ./tools/chubbyd; then
		rm -f "$overlay"
		return 1
	fi
	rm -f "$overlay"
	exec bin/chubbybench --chubbyd bin/chubbyd --chubbyd-pprof bin/chubbyd-pprof "$@"
}

case "${1:-build}" in
build) build ;;
gen) gen ;;
test) test_all ;;
bench)
	shift
	bench "$@"
	;;
python) python_gen ;;
java) java_build ;;
sim)
	shift
	go test ./cell/sim -run 'TestSim$' -count=1 -timeout 0 -v -args "$@" | grep -v -e '^=== RUN' -e '^    --- PASS'
	;;
help | -h | --help) sed -n '2,/^[^#]/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
*)
	echo "unknown command: $1 (try ./build.sh help)" >&2
	exit 2
	;;
esac
