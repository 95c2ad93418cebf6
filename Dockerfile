# One image for every role; the command picks api, worker, or both.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY api ./api
COPY workers ./workers
COPY shared ./shared
COPY storage ./storage
COPY bin ./bin
COPY console ./console
# The type check the old tsc build did, then the same build `npm start` runs (esbuild for the server, Vite for the console).
RUN npx tsc -p tsconfig.build.json --noEmit && npm run build && npm prune --omit=dev

FROM node:24-bookworm-slim
# A container listens on its network; `npm start` on a laptop binds 127.0.0.1 instead.
# Everything the gateway writes goes under /data, a volume owned by `node`: the embedded
# record (DATA_DIR, used when DATABASE_URL is unset) and the local blobs (BLOB_DIR, unless
# S3_BUCKET is set). /app stays root's: the gateway only reads it.
ENV NODE_ENV=production HOST=0.0.0.0 DATA_DIR=/data BLOB_DIR=/data/blobs
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
RUN mkdir -p /data/blobs && chown -R node:node /data && chmod 0700 /data
VOLUME /data
USER node
EXPOSE 8080
# node itself, not an npm script, so the SIGTERM `docker stop` sends reaches the gateway, which
# drains (give it the time: `docker stop -t 40`, compose's stop_grace_period). With nothing but
# REDIS_URL it runs the api and the workers on the embedded record in /data.
CMD ["node", "dist/bin/start.js", "--role=all"]
