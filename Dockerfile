# mqproc processing server on Debian 12. Build: docker-compose build (see docker-compose.yml).
# --- build stage --------------------------------------------------------------------------
FROM debian:12-slim AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config ca-certificates \
      librabbitmq-dev libpq-dev libjansson-dev libcurl4-openssl-dev libyaml-dev libxml2-dev \
      libssl-dev libmicrohttpd-dev libsqlite3-dev libpcre2-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMQPROC_TESTS=OFF \
      -DCMAKE_INSTALL_PREFIX=/usr/local \
 && cmake --build /build -j"$(nproc)" \
 && cmake --install /build --prefix /usr/local

# --- runtime stage ------------------------------------------------------------------------
FROM debian:12-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates procps \
      librabbitmq4 libpq5 libjansson4 libcurl4 libyaml-0-2 libxml2 \
      libssl3 libmicrohttpd12 libsqlite3-0 libpcre2-8-0 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local /usr/local
RUN ldconfig \
 && useradd --system --home-dir /var/lib/mqproc --create-home mqproc
USER mqproc
WORKDIR /var/lib/mqproc
CMD ["mqproc", "--help"]
