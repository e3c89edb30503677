GO ?= go

.PHONY: demo match test fmt-check vet staticcheck check-gen unit gen proto bench chaos fuzz flood

## demo: the chat example: a two-node mesh in one process on an embedded etcd, and a scripted
## chat session.
demo:
	@$(GO) run ./examples/chat

## match: the match example: three nodes in one process, 200 players playing matches, and a
## rolling update of one node to a newer version under live play; ends with a summary.
match:
	@$(GO) run ./examples/match

## test: everything CI runs: formatting, vet, staticcheck, generated code up to date, then all
## tests with the race detector (bench/peers's Proto.Actor side without it, see unit).
test: fmt-check vet staticcheck check-gen unit

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## staticcheck: honnef.co/go/tools at a pinned version, through go run so that nothing needs to
## be installed; on this module and on bench/peers, a module of its own, with staticcheck's
## default checks. Files with a "Code generated ... DO NOT EDIT." header (*.pb.go, *_zlink.go)
## are exempt from most checks; zlinkgen's output is kept clean of them all the same.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck:
	$(GO) run $(STATICCHECK) ./...
	cd bench/peers && $(GO) run $(STATICCHECK) ./...

## unit: every test with the race detector, bench/peers's (a module of its own) included; its
## Proto.Actor side runs without it: protoactor-go's remote.Start sets gRPC's process-wide
## logger each time it starts, which races with the logging of any gRPC server already running.
unit:
	$(GO) test -race -count=1 -timeout 20m ./...
	cd bench/peers && $(GO) test -race -count=1 -timeout 10m $$($(GO) list ./... | grep -v '/paside$$')
	cd bench/peers && $(GO) test -count=1 -timeout 10m ./paside

## gen: regenerate the repository's own generated code (zlinkgen, run by go generate).
gen:
	$(GO) generate ./...

## check-gen: fail, naming them, when generated files are stale or missing (zlinkgen -check on
## every package of the module; it writes nothing).
check-gen:
	$(GO) run ./cmd/zlinkgen -check ./...

## proto: regenerate every committed .pb.go from its .proto (needs protoc and protoc-gen-go;
## the README says how to install them), and the mesh's generated encoding code
## (wire_vtproto.pb.go) with the vtprotobuf generator of the version go.mod names.
PROTOS := $(shell git ls-files '*.proto')
VTPROTO_BIN := $(CURDIR)/bin/protoc-gen-go-vtproto
proto:
	@for p in $(PROTOS); do \
		echo "protoc $$p"; \
		(cd $$(dirname $$p) && protoc --go_out=. --go_opt=paths=source_relative $$(basename $$p)) || exit 1; \
	done
	$(GO) build -o $(VTPROTO_BIN) github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto
	cd rt/internal/wire && protoc --plugin=protoc-gen-go-vtproto=$(VTPROTO_BIN) \
		--go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+unmarshal_unsafe+size wire.proto

## bench: ZLink and Proto.Actor Go side by side on the same workloads (bench/peers, a module of
## its own): medians of 3 alternating runs each, one table, written to bench/RESULTS.md. Takes
## about 6 minutes on 2 cores.
bench:
	cd bench/peers && $(GO) run ./cmd/peerbench -out ../RESULTS.md

## flood: 64 callers flood a node process with 1 MiB messages for 10 s; the test reports the
## node's resident memory, its Core HWM peak and another node's latency meanwhile. It needs the
## machine to itself, so make test leaves it out.
flood:
	ZLINK_FLOOD=1 $(GO) test -count=1 -timeout 10m -run 'TestE6_FloodAcrossProcesses' -v ./rt/

## chaos: the fault suite at full length, on fresh 3-member etcd clusters and node processes
## with a proxy on every link (about 10 minutes on 2 cores); writes docs/RELIABILITY.md, and the
## visualization of any history that is not linearizable under .chaos/. Short forms of two of
## its scenarios run in make test.
chaos:
	@mkdir -p $(CURDIR)/.chaos
	$(GO) test -count=1 -timeout 30m -run 'TestChaos' -v -artifacts -outputdir=$(CURDIR)/.chaos ./rt/internal/chaos/ \
		-args -chaos -chaos.report=$(CURDIR)/docs/RELIABILITY.md

## fuzz: every fuzz target for FUZZTIME each (default 60s): hostile bytes into a node's mesh
## stream, IDs and keys, stored records, generator directives and build constraints, the chat
## command line. Their seed corpora run in make test as ordinary tests.
FUZZTIME ?= 60s
FUZZ := FuzzHandleBatch:./rt/internal/transport/ FuzzIDKeyRoundTrip:./rt/internal/store/ FuzzDecodeRecord:./rt/internal/store/ \
	FuzzTxnCodecReadsAsProtobufReads:./rt/internal/store/ \
	FuzzDirectives:./internal/gen/ FuzzBuildConstraint:./internal/gen/ FuzzCommand:./examples/chat/
fuzz:
	@for t in $(FUZZ); do name=$${t%%:*}; pkg=$${t#*:}; \
		echo "fuzz $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done
