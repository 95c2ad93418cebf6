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
ENV NODE_ENV=production HOST=0.0.0.0
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
RUN mkdir -p /blobs && chown node:node /blobs
USER node
EXPOSE 8080
CMD ["node", "dist/bin/start.js", "--role=all"]
