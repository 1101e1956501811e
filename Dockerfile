# ojsd container image: a release build of the server on a slim Debian runtime.
#
#   docker build -t ojsd .
#   docker run -e DATABASE_URL=postgres://user:pass@host:5432/ojs -p 8080:8080 ojsd
#
# Queries are checked at compile time against the committed .sqlx/ data, so the build needs
# no database.

FROM rust:1-bookworm AS build
WORKDIR /src
ENV SQLX_OFFLINE=true CARGO_TERM_COLOR=never
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ojsd \
    && cp target/release/ojsd /usr/local/bin/ojsd

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home ojsd
COPY --from=build /usr/local/bin/ojsd /usr/local/bin/ojsd
USER ojsd
ENV OJS_LISTEN_ADDR=0.0.0.0:8080
EXPOSE 8080
# SIGTERM starts a graceful shutdown (in-flight requests finish, up to OJS_SHUTDOWN_TIMEOUT_SECS).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ojsd"]
CMD ["serve"]
