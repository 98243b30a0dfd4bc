# Builds the daemon and runs it. Inside a container loopback is unreachable from outside, so the
# image listens on all interfaces: set EXEC_SERVER_CONNECTION_TOKEN to require a bearer token.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin exec-server

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates python3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/exec-server /usr/local/bin/exec-server
EXPOSE 8765
HEALTHCHECK CMD ["sh", "-c", "exec 3<>/dev/tcp/127.0.0.1/8765 && printf 'GET /readyz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q ' 200 ' <&3"]
ENTRYPOINT ["exec-server"]
CMD ["--listen", "ws://0.0.0.0:8765"]
