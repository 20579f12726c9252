# sluice/deploy-init: one-shot certificate generation and etcd bootstrap
# (roles, users, auth, first desired state). Runs as root only to chown the
# certificate volumes to the services' uid 65534.
FROM scratch
COPY deploy-init /
COPY --chown=65534:65534 rootfs/tmp /tmp
ENTRYPOINT ["/deploy-init"]
