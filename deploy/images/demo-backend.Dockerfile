# sluice/demo-backend: the demo backend (JSON answers, /healthz, /metrics, /stats).
FROM scratch
COPY demo-backend healthcheck /
USER 65534:65534
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --retries=3 CMD ["/healthcheck", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/demo-backend"]
