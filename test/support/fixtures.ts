import { fileURLToPath } from 'node:url';

/** The recorded vendor streams in `../shared/wire/fixtures` (the read-only reference beside the checkout). */
export const wireFixturesDir = process.env.WIRE_FIXTURES_DIR ?? fileURLToPath(new URL('../../../shared/wire/fixtures/', import.meta.url));

export const wireFixture = (name: string) => `${wireFixturesDir.replace(/\/$/, '')}/${name}`;
