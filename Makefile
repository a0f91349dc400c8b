# leasewatch — build, test and checks. `make test` is what CI runs.
GO       ?= go
PKGS     := ./...
# The race detector slows embedded etcd a lot; tests are sized for 2 cores.
TESTFLAGS ?= -race -count=1 -timeout 20m
SUDO     := $(if $(filter 0,$(shell id -u)),,sudo)
# The container image (deploy/container/Dockerfile): its tag, version and
# builder (buildah, or docker), and the context make image-context fills.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE    ?= leasewatch:$(VERSION)
IMAGE_BUILDER ?= buildah
IMAGE_CONTEXT ?= $(CURDIR)/bin/image-context
# The browser tests save their screenshots here (git-ignored) for CI to keep.
ARTIFACTS := $(CURDIR)/artifacts

.PHONY: all build test check generate deps demo demo-screenshots clean load-kubernetes load-kubernetes-130k load-redis load-postgres load-etcd load-zookeeper load-ingest load-failover load-dbfailover load-rolling crash bench-ingest bench-pages bench-retention bench-memory soak soak-postgres install-redis install-zookeeper install-postgresql install-quartz install-chromium install-systemd install-buildah image image-context

all: build

build:
	$(GO) build -o bin/leasewatch ./cmd/leasewatch

## deps: install or build what the tests need on a fresh Debian machine:
## Go modules (etcd runs in-process), redis-server, zookeeper, postgresql, Quartz with a JDK and chromium from Debian, and a real kube-apiserver, built from the
## Kubernetes Go module into .cache/ (several minutes the first time, then
## reused until its wrapper module changes), and a real Alertmanager, built
## from its Go module into .cache/alertmanager-<version>/ (a few minutes once).
deps:
	@command -v $(GO) >/dev/null || { echo "Go is required: https://go.dev/doc/install" >&2; exit 1; }
	@command -v redis-server >/dev/null || $(MAKE) install-redis
	@test -f /usr/share/java/zookeeper.jar -a -d /usr/lib/python3/dist-packages/kazoo || $(MAKE) install-zookeeper
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || $(MAKE) install-postgresql
	@test -f /usr/share/java/quartz2.jar -a -f /usr/share/java/postgresql.jar -a -x /usr/bin/javac || $(MAKE) install-quartz
	@test -x /usr/bin/chromium || $(MAKE) install-chromium
	@command -v systemd-analyze >/dev/null || $(MAKE) install-systemd
	@command -v buildah >/dev/null || $(MAKE) install-buildah
	$(GO) mod download
	$(GO) run ./collectors/kubernetes/kubetest/buildapiserver
	$(GO) run ./audit/alert/alertmanagertest/buildalertmanager
	$(GO) run ./deploy/prometheus/promtooltest/buildpromtool
	$(GO) run ./deploy/helm/helmtest/buildhelm

## install-redis: Debian's redis-server, for the Redis collector's tests.
install-redis:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server

## install-zookeeper: Debian's ZooKeeper server (3.8, with a Java runtime), for the
## ZooKeeper collector's tests. The tests run it with java from
## /usr/share/java/zookeeper.jar on a free loopback port; the package starts nothing.
## python3-kazoo is the Python client whose recipes the tests run with /usr/bin/python3.
install-zookeeper:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zookeeper python3-kazoo

## install-postgresql: Debian's PostgreSQL server, for the Postgres store's tests.
## Each test package initdb's and runs its own server on a free port; the
## cluster Debian creates (and may start) on port 5432 is never used.
install-postgresql:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql

## install-quartz: Debian's Quartz 2.3 (with HikariCP and SLF4J), its PostgreSQL JDBC driver and a JDK:
## the PostgreSQL collector's tests compile a small clustered scheduler with javac and run two of it.
install-quartz:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends default-jdk-headless libquartz2-java libpostgresql-jdbc-java

## install-systemd: Debian's systemd, whose systemd-analyze checks deploy/systemd's unit.
install-systemd:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd

## install-buildah: Debian's buildah, which builds the container image in the tests (vfs storage, no daemon).
install-buildah:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah

## image-context: the container image's build context: the static binary, the CA bundle, the state directory.
image-context:
	rm -rf "$(IMAGE_CONTEXT)" && mkdir -p "$(IMAGE_CONTEXT)/state"
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o "$(IMAGE_CONTEXT)/leasewatch" ./cmd/leasewatch
	cp /etc/ssl/certs/ca-certificates.crt "$(IMAGE_CONTEXT)/"

## image: the container image $(IMAGE), from scratch, with $(IMAGE_BUILDER) (buildah on vfs storage, or docker).
image: image-context
	STORAGE_DRIVER=$${STORAGE_DRIVER:-vfs} $(IMAGE_BUILDER) build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		-f deploy/container/Dockerfile -t $(IMAGE) "$(IMAGE_CONTEXT)"

## install-chromium: Debian's Chromium, for the dashboard's browser tests.
install-chromium:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium

## load-kubernetes: the Kubernetes scale run (2,000 heartbeat + 50 election Leases).
load-kubernetes:
	$(GO) run ./cmd/leasewatch-load kubernetes

## load-kubernetes-130k: a 130,000-node cluster's heartbeats (13,000 renewals/s), a real kube-apiserver's recorded watch replayed.
load-kubernetes-130k:
	$(GO) run ./cmd/leasewatch-load kubernetes --replay --heartbeats 130000 --warmup 15s --duration 60s

## load-redis: the Redis scale run (10,000 locks with 2 s TTLs extended every 500 ms).
load-redis:
	$(GO) run ./cmd/leasewatch-load redis

## load-postgres: PostgreSQL lease-table changes (2,500 ShedLock rows, 5,000 row changes/s) streamed by logical replication, checked change by change; then 1,000 sessions taking and releasing advisory locks.
load-postgres:
	$(GO) run ./cmd/leasewatch-load postgres
	$(GO) run ./cmd/leasewatch-load postgres --advisory-sessions 1000

## load-failover: two replicas on PostgreSQL share etcd, Kubernetes and Redis sources under load; the owner of a source is killed (kill -9) 20 times.
load-failover:
	$(GO) run ./cmd/leasewatch-load failover --kills 20

## load-dbfailover: the same replicated load on a PostgreSQL primary with a synchronous standby; the primary is killed and the standby promoted 20 times (the old primary rebuilt as the new one's standby each time).
load-dbfailover:
	$(GO) run ./cmd/leasewatch-load dbfailover --failovers 20

## load-rolling: both replicas restarted in turn while 200 Kubernetes Leases renew every 2 s.
load-rolling:
	$(GO) run ./cmd/leasewatch-load rolling

## load-etcd: the etcd scale run (5,000 concurrency.Mutex locks, 2 contenders each, handed over every 2 minutes).
load-etcd:
	$(GO) run ./cmd/leasewatch-load etcd

## load-zookeeper: the ZooKeeper scale run (2,000 lock directories, 2 contenders each by the documented recipe, handed over every 4 s).
load-zookeeper:
	$(GO) run ./cmd/leasewatch-load zookeeper

## load-ingest: 200 resources posting write reports and 50 people browsing the dashboard for 5 minutes (latency, RSS, exactly-once).
load-ingest:
	$(GO) run ./cmd/leasewatch-load ingest

## crash: the full kill -9 run (20 kills at random moments; the normal test run does 8).
crash:
	LEASEWATCH_CRASH_KILLS=20 $(GO) test -race -count=1 -run TestCrashKillNineWhileBusy -v ./cmd/leasewatch

## bench-ingest: the write path against a plain-SQLite baseline, then into PostgreSQL alternating with SQLite (events/s, ratio, allocations, bytes per renewal), and SQLite's bytes per renewal sealed into runs beside rows (node lease, leader election).
bench-ingest:
	$(GO) test -run '^$$' -bench Ingest -benchtime 300x ./audit/sqlite/
	$(GO) test -run '^$$' -bench RenewalRuns -benchtime 1x ./audit/sqlite/
	$(GO) test -run '^$$' -bench Ingest -benchtime 300x ./audit/postgres/

## bench-pages: server time of every page and the main API on 11.7M generated events, on SQLite and (BenchmarkPagesPostgres) PostgreSQL beside it, and the lock page's memory as its writes grow (BENCHMARKS.md).
bench-pages:
	$(GO) test -run '^$$' -bench Pages -benchtime 60x -timeout 120m ./web/
	$(GO) test -run '^$$' -bench LockPageWriteStrip -benchmem -benchtime 20x ./web/

## bench-memory: heap per tracked lock, the tracker's clock-expiry Tick and alert evaluation over 100,000 locks against a full scan.
bench-memory:
	$(GO) test -run '^$$' -bench TrackerMemory -benchtime 1x ./audit/
	$(GO) test -run '^$$' -bench TrackerTick ./audit/
	$(GO) test -run '^$$' -bench AlertingEvaluate ./audit/alert/

## bench-retention: ingest into PostgreSQL and SQLite, alternating, while retention prunes each (p99 and worst input, sizes).
bench-retention:
	$(GO) test -run '^$$' -bench Retention -benchtime 2000x -timeout 30m ./audit/postgres/

## soak: the retention soak (Redis, 2,000 events/s for 30 minutes, short retention; the size must level off).
soak:
	$(GO) run ./cmd/leasewatch-load soak

## soak-postgres: the same soak with leasewatch's database on PostgreSQL.
soak-postgres:
	$(GO) run ./cmd/leasewatch-load soak --postgres

## test: every test, with the race detector; browser screenshots go to artifacts/.
test: deps
	mkdir -p "$(ARTIFACTS)"
	$(GO) vet $(PKGS)
	LEASEWATCH_ARTIFACTS="$(ARTIFACTS)" $(GO) test $(TESTFLAGS) $(PKGS)

## demo-screenshots: the demo in a browser 1 and 10 minutes after it started, checked and screenshotted to artifacts/ (kept out of make test: it would starve the other packages' timing on 2 cores).
demo-screenshots: deps
	mkdir -p "$(ARTIFACTS)"
	LEASEWATCH_ARTIFACTS="$(ARTIFACTS)" LEASEWATCH_DEMO_MINUTES=10 $(GO) test -count=1 -timeout 20m -run TestDemoInABrowser ./cmd/leasewatch/

## generate: regenerate templ views (generated files are committed).
generate:
	$(GO) tool templ generate
	$(GO) generate ./deploy/prometheus/operator

## check: formatting, tidy modules, staticcheck (its default checks, unused code included), the import rules, and generated files are up to date.
check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) mod tidy -diff
	$(GO) tool staticcheck ./...
	$(GO) test -count=1 -run 'TestImportRules' ./docs/
	$(GO) tool templ generate
	$(GO) generate ./deploy/prometheus/operator
	@git diff --exit-code -- '*_templ.go' deploy/prometheus/operator/prometheusrule.yaml deploy/helm/leasewatch/files/ || { echo "generated files are stale: run make generate and commit" >&2; exit 1; }

demo:
	$(GO) run ./cmd/leasewatch demo

clean:
	rm -rf bin artifacts
