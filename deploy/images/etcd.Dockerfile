# sluice/etcd: etcd's server built from the etcd module pinned in
# integration/go.mod (integration/cmd/etcd calls etcdmain.Main).
# Configure with ETCD_* variables; expose metrics/health on
# ETCD_LISTEN_METRICS_URLS=http://127.0.0.1:2381 for the health check.
FROM scratch
COPY etcd healthcheck /
COPY --chown=65534:65534 rootfs/var/lib/etcd /var/lib/etcd
COPY --chown=65534:65534 rootfs/tmp /tmp
USER 65534:65534
ENV ETCD_DATA_DIR=/var/lib/etcd/data
EXPOSE 2379 2380
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 CMD ["/healthcheck", "http://127.0.0.1:2381/health"]
ENTRYPOINT ["/etcd"]
