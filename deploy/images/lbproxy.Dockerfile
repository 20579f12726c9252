# sluice/lbproxy: the data plane, FROM scratch (static binary, no shell).
# Build context: the staging directory made by `make images` (deploy/deploy.mk).
FROM scratch
COPY lbproxy healthcheck /
COPY --chown=65534:65534 rootfs/var/cache/sluice /var/cache/sluice
COPY --chown=65534:65534 rootfs/tmp /tmp
USER 65534:65534
ENV SLUICE_LISTEN=0.0.0.0:8080 SLUICE_CACHE_DIR=/var/cache/sluice
EXPOSE 8080 9090
# /readyz answers 200 once a snapshot is applied (from etcd or the disk cache).
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 CMD ["/healthcheck", "http://127.0.0.1:9090/readyz"]
ENTRYPOINT ["/lbproxy"]
