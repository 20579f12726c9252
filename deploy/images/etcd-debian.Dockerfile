# sluice/etcd-debian: Debian's etcd server (package etcd-server, 3.4.x), the
# older real etcd the chaos suite runs against as well (ETCD_FLAVOUR=debian).
# Debian builds /usr/bin/etcd dynamically linked: `make images` stages it
# with the libraries ldd names (libc, the loader) under etcd-debian/
# (deploy/scripts/stage-host-etcd.sh), so the image is still FROM scratch.
# Same ETCD_* configuration and health check as sluice/etcd.
FROM scratch
COPY etcd-debian/ /
COPY healthcheck /
COPY --chown=65534:65534 rootfs/var/lib/etcd /var/lib/etcd
COPY --chown=65534:65534 rootfs/tmp /tmp
USER 65534:65534
ENV ETCD_DATA_DIR=/var/lib/etcd/data
EXPOSE 2379 2380
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 CMD ["/healthcheck", "http://127.0.0.1:2381/health"]
ENTRYPOINT ["/etcd"]
