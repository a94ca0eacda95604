# syntax=docker/dockerfile:1
# The stampede image for users with a container registry: one binary serves every role
# (controller, agent, target servers, CLI). Build:  docker build -t <registry>/stampede:<tag> .
# The test cluster (tests/cluster) packs an equivalent image without Docker or a registry.
# The release profile (root Cargo.toml) links with fat LTO and one codegen unit and strips the
# debug info, so the binary every agent pulls is about 24 MB (it was 154 MB with line tables);
# for profiles, build `--profile profiling` instead (the same code with line tables).
# By default the binary is also profile-guided (bench/pgo.sh: an instrumented build runs a few
# minutes of load and every example against the project's own targets on the build's loopback,
# then the release build uses that profile: about 5-10 % less CPU per request in the closed and
# constant cases, see docs/performance.md). It costs a second release build; `--build-arg PGO=0`
# skips it.

FROM rust:1.95-bookworm AS build
ARG PGO=1
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    if [ "$PGO" = 1 ]; then \
        rustup component add llvm-tools && bash bench/pgo.sh /out/stampede; \
    else \
        cargo build --release --locked -p stampede \
        && install -D -m 0755 target/release/stampede /out/stampede; \
    fi

FROM debian:bookworm-slim
RUN groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
COPY --from=build /out/stampede /usr/local/bin/stampede
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/stampede"]
