# sluice/lbscheduler: computes the W matrix and publishes snapshots (leader only).
FROM scratch
COPY lbscheduler healthcheck /
COPY --chown=65534:65534 rootfs/tmp /tmp
USER 65534:65534
EXPOSE 9400
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 CMD ["/healthcheck", "http://127.0.0.1:9400/healthz"]
ENTRYPOINT ["/lbscheduler"]
