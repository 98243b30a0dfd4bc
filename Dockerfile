# The daemon in a container. Inside a container loopback is unreachable from outside, so the
# image listens on all interfaces: give it a token (EXEC_SERVER_CONNECTION_TOKEN_FILE, or
# EXEC_SERVER_CONNECTION_TOKEN) unless the network around it is private.
#
#   docker build -t exec-server .          # builds the binary too (rust:1-bookworm)
#   deploy/build-image.sh                  # a binary built beforehand, any base (--target prebuilt)
#
# The state dir (/run/exec-server, the default for root) belongs on tmpfs, which the image
# cannot declare: run with `--tmpfs /run/exec-server:rw,mode=0700` (on the overlay, which is
# disk, launches are several times slower; the daemon warns at start). docs/operations.md.
#
# The Linux sandbox needs CAP_SYS_ADMIN and a few syscalls the default seccomp profile refuses:
# docs/operations.md says which flags and why; without them processes run unsandboxed and
# sandboxed requests are refused.
ARG BASE=debian:bookworm-slim

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin exec-server \
    && objcopy --strip-debug target/release/exec-server

# Only what the daemon needs: the C library (in any base), the CA roots its http/request
# verifies TLS against, and tini as PID 1, which reaps the orphans of the commands it runs (the
# daemon reaps only its own children) and passes SIGTERM on. The base's shell and coreutils are
# for the commands it runs.
FROM ${BASE} AS runtime
RUN if [ ! -e /etc/ssl/certs/ca-certificates.crt ] || [ ! -x /usr/bin/tini ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends ca-certificates tini \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
    && mkdir -p /workspace
WORKDIR /workspace
EXPOSE 8765
ENV EXEC_SERVER_LISTEN=ws://0.0.0.0:8765
# The daemon's own probe: the base's sh (dash) has no /dev/tcp, and there is no curl.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s \
    CMD ["exec-server", "ready", "--url", "ws://127.0.0.1:8765", "--timeout", "4s"]
# SIGTERM kills the processes it manages and exits within seconds (docs/operations.md).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "exec-server"]

# The same image around a binary built beforehand, from a context holding
# target/release/exec-server (deploy/build-image.sh makes one).
FROM runtime AS prebuilt
COPY target/release/exec-server /usr/local/bin/exec-server

# The default: the binary built above.
FROM runtime
COPY --from=build /src/target/release/exec-server /usr/local/bin/exec-server
