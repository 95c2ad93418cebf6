import { defineConfig } from 'vite';

// The console SPA. bin/build.mjs builds it with this file (root: console/) into
// dist/console, which the api serves under /console. Every page path answers
// index.html, so routes are real paths (History API), hence base '/console/'.
export default defineConfig({
  base: '/console/',
  publicDir: 'public',
  oxc: {
    jsx: { runtime: 'automatic', importSource: 'preact' },
  },
  build: {
    outDir: '../dist/console',
    emptyOutDir: true,
    assetsDir: 'assets',
    target: 'es2022',
    sourcemap: false,
    // The CSP forbids inline script and style: no inlined assets, no polyfill snippet.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
});
