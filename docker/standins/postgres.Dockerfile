# A stand-in for the official postgres image, built from Debian bookworm's PostgreSQL 15 for
# machines that cannot pull from a registry (tests/deploy builds it as postgres:15 only then).
# It honours what docker-compose.yml uses of the official image: POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB, PGDATA (/var/lib/postgresql/data, the volume), port 5432 and pg_isready.
ARG BASE_IMAGE=blocktune-debian:bookworm
FROM ${BASE_IMAGE}
LABEL org.blocktune.standin="postgres:15 from Debian bookworm's postgresql-15"
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=5s --timeout=5s --retries=20 \
    CMD pg_isready -h 127.0.0.1 -U "${POSTGRES_USER:-postgres}" -d "${POSTGRES_DB:-${POSTGRES_USER:-postgres}}" || exit 1
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
