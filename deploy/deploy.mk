# deploy/deploy.mk — Docker images, the compose fleet and the chaos suite.
# Included by the top-level Makefile (include deploy/deploy.mk).
#
#   make images       static binaries + FROM scratch images sluice/*:dev
#   make deploy-up    images, .env with fresh tokens, the whole fleet up (waits for health)
#   make deploy-down  the fleet down, volumes and networks removed
#   make chaos        the process-level chaos suite (integration/chaos, tag chaos) on a
#                     fresh fleet per etcd flavour: ETCD_FLAVOUR="embedded debian" by
#                     default (embedded: our etcd module, every scenario; debian:
#                     Debian's etcd-server 3.4 from /usr/bin/etcd, the etcd scenarios)

GO             ?= go
DEPLOY_DIR     := $(CURDIR)/deploy
DEPLOY_BUILD   := $(DEPLOY_DIR)/.build
COMPOSE_DIR    := $(DEPLOY_DIR)/compose
IMAGE_TAG      ?= dev
# docker compose (plugin) when present, else docker-compose (v1).
COMPOSE        ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_CMD    := cd $(COMPOSE_DIR) && $(COMPOSE) -p sluice
IMAGE_BINS     := lbproxy lbscheduler lbagent lbctl demo-backend etcd healthcheck deploy-init
IMAGES         := lbproxy lbscheduler lbagent lbctl demo-backend etcd deploy-init
CHAOS_TIMEOUT  ?= 25m
CHAOS_RUN      ?= .
# etcd servers the chaos suite runs against, in order (see integration/chaos).
ETCD_FLAVOUR   ?= embedded debian
# Debian's etcd server (package etcd-server), staged into sluice/etcd-debian.
HOST_ETCD      ?= /usr/bin/etcd

.PHONY: images deploy-up deploy-down chaos

## images: FROM scratch images of every component (no pulls)
images:
	@mkdir -p $(DEPLOY_BUILD)/rootfs/var/cache/sluice $(DEPLOY_BUILD)/rootfs/var/lib/etcd $(DEPLOY_BUILD)/rootfs/tmp
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(DEPLOY_BUILD)/ \
	  ./proxy/cmd/lbproxy ./scheduler/cmd/lbscheduler ./agent/cmd/lbagent ./cli/cmd/lbctl \
	  ./integration/cmd/demo-backend ./integration/cmd/etcd ./integration/cmd/healthcheck ./integration/cmd/deploy-init
	@set -e; imgs="$(IMAGES)"; \
	if [ -x "$(HOST_ETCD)" ]; then bash $(DEPLOY_DIR)/scripts/stage-host-etcd.sh "$(HOST_ETCD)" $(DEPLOY_BUILD)/etcd-debian; imgs="$$imgs etcd-debian"; \
	elif [ "$$CI" = true ]; then echo "images: $(HOST_ETCD) missing: CI needs Debian's etcd-server for sluice/etcd-debian (.ci/run installs it)" >&2; exit 1; \
	else echo "images: $(HOST_ETCD) missing: no sluice/etcd-debian (apt-get install etcd-server)"; fi; \
	for i in $$imgs; do \
	  echo "== docker build sluice/$$i:$(IMAGE_TAG)"; \
	  if ! DOCKER_BUILDKIT=0 docker build -t sluice/$$i:$(IMAGE_TAG) -f $(DEPLOY_DIR)/images/$$i.Dockerfile $(DEPLOY_BUILD) >$(DEPLOY_BUILD)/build-$$i.log 2>&1; then \
	    cat $(DEPLOY_BUILD)/build-$$i.log; exit 1; fi; \
	done
	@docker images 'sluice/*' --format '{{.Repository}}:{{.Tag}} {{.Size}}'

## deploy-up: the compose fleet, healthy (tokens in deploy/compose/.env)
deploy-up: images
	$(DEPLOY_BUILD)/deploy-init secrets --env-file $(COMPOSE_DIR)/.env --extra COMPOSE_PROJECT_NAME=sluice
	$(COMPOSE_CMD) up -d
	@bash $(DEPLOY_DIR)/scripts/wait-healthy.sh sluice 180

## deploy-down: stop the fleet and remove its containers, networks and volumes
deploy-down:
	-$(COMPOSE_CMD) --profile tools down -v --remove-orphans --timeout 5
	-@docker network ls -q --filter label=com.docker.compose.project=sluice | xargs -r docker network rm >/dev/null 2>&1
	-@docker volume ls -q --filter label=com.docker.compose.project=sluice | xargs -r docker volume rm >/dev/null 2>&1

## chaos: the chaos suite against a fresh fleet per etcd flavour; always torn down afterwards
chaos: images
	@set -e; for f in $(ETCD_FLAVOUR); do \
	  bash $(DEPLOY_DIR)/scripts/chaos.sh "$(COMPOSE)" "$(CHAOS_TIMEOUT)" "$(CHAOS_RUN)" "$$f"; \
	done
