# sluice/lbctl: the operator tool.
FROM scratch
COPY lbctl /
COPY --chown=65534:65534 rootfs/tmp /tmp
USER 65534:65534
ENTRYPOINT ["/lbctl"]
