# streamdi: the service, the TPC-DI job, and the Spark master and workers of the compose stack.
#
# One image for the driver and the Spark cluster, so the Python, pyarrow, numba and streamdi that
# run inside Spark tasks are exactly the driver's. Java 17 (Debian's OpenJDK runtime) runs Spark.
# Spark's standalone master and worker come from the pyspark installation (SPARK_HOME below).
#
#   docker build -t streamdi:0.1.0 .
#   docker run --rm streamdi:0.1.0 --help
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The man directory is missing from slim images and the JRE's postinst expects it.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/streamdi

# Dependencies first (from pyproject.toml alone), so a code change does not reinstall them.
COPY pyproject.toml README.md ./
RUN python -c "import subprocess, sys, tomllib; \
deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
subprocess.check_call([sys.executable, '-m', 'pip', 'install', *deps])"

COPY streamdi ./streamdi
COPY ingest ./ingest
COPY etl_dataflows ./etl_dataflows
COPY staging ./staging
COPY warehouse ./warehouse
COPY migration ./migration
COPY api ./api
COPY tpcdi ./tpcdi
COPY benchmarks ./benchmarks
RUN pip install --no-deps . \
    && ln -s "$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin streamdi \
    && mkdir -p /var/lib/streamdi \
    && chown streamdi:streamdi /var/lib/streamdi

# Spark's scripts (spark-class) from the pyspark wheel.
ENV SPARK_HOME=/opt/spark \
    PATH=/opt/spark/bin:$PATH \
    STREAMDI__STATE_DIR=/var/lib/streamdi \
    API__HOST=0.0.0.0

# State lives in /var/lib/streamdi: the compose file mounts a named volume there (no VOLUME
# here, which would give the Spark master an anonymous volume it does not need).
USER streamdi
WORKDIR /var/lib/streamdi
EXPOSE 8000

# tini reaps Spark's and the embedded services' children and forwards SIGTERM to streamdi.
ENTRYPOINT ["tini", "--", "streamdi"]
CMD ["--help"]
