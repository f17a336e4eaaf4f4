# SMG (Shepherd Model Gateway), the router in front of the specdec replicas
# (k8s/serving/smg.yaml), pinned to the version deploy/README.md was checked with.
# Build: docker build -f deploy/smg.Dockerfile -t specdec-smg:1.13.0 deploy
FROM python:3.11-slim
RUN pip install --no-cache-dir smg==1.13.0
ENTRYPOINT ["smg", "launch"]
