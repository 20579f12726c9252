# sluice/lbagent: registers one backend instance and probes it.
FROM scratch
COPY lbagent /
COPY --chown=65534:65534 rootfs/tmp /tmp
USER 65534:65534
# `lbagent check` runs one probe of the backend with the same SLUICE_*
# settings as the agent itself: the container is healthy when its backend is.
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 CMD ["/lbagent", "check"]
ENTRYPOINT ["/lbagent"]
