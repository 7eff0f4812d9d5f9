# Dockerfile - the tessera image: built with the repository's CMake on Debian
# 12 (bookworm), run as a non-root user with the binary and only the shared
# libraries it loads.
#
#     docker build -t tessera:latest .
#     docker run --rm -p 8080:8080 -v $PWD/deploy-config:/etc/tessera:ro \
#         -v $PWD/models:/models:ro tessera:latest
#
# The manifests `tessera plan --emit k8s` writes run this image (runAsUser
# 10001, the user below). tests/dockerfile.sh checks, without docker, that
# the runtime stage installs exactly the packages whose libraries
# `ldd build/tessera` lists and that its user is not root: update the
# runtime package list with the binary's link line.
#
# GPU image: there is none yet. The CUDA backend (issue 17) compiles but has
# not run on a GPU, so this image is the CPU build (TESSERA_CUDA=OFF): it runs
# its CPU engine even on a GPU node, and the GPU it requests is reserved, not
# used. When the backend is verified, the GPU image adds a stage
# built FROM nvidia/cuda:<version>-devel and run FROM
# nvidia/cuda:<version>-runtime (NVIDIA publishes no Debian-based CUDA
# images, so that stage builds on their Ubuntu base rather than copying this
# Debian binary across glibc versions).

ARG DEBIAN=bookworm

# ---- build --------------------------------------------------------------------
FROM debian:${DEBIAN} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake pkg-config \
        libopenblas-dev libcmocka-dev libmicrohttpd-dev libcjson-dev libyaml-dev \
        libssl-dev libcurl4-openssl-dev libpcre2-dev libhiredis-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Portable code: -march=native would tune the image to the build machine and
# fault with an illegal instruction on an older node's CPU.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DTESSERA_NATIVE=OFF -DTESSERA_CUDA=OFF \
    && cmake --build /build -j"$(nproc)" --target tessera

# ---- runtime ------------------------------------------------------------------
FROM debian:${DEBIAN}-slim AS runtime
# One package per library the binary links (readelf -d: NEEDED); apt brings
# their own dependencies. libc6 and libgcc-s1 are in the base image.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libopenblas0-pthread libpcre2-8-0 \
        libgomp1 libssl3 libmicrohttpd12 libcjson1 libyaml-0-2 libcurl4 libhiredis0.14 \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 tessera \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin tessera
COPY --from=build /build/tessera /usr/local/bin/tessera
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tessera"]
CMD ["serve", "--config", "/etc/tessera/tessera.yaml"]
