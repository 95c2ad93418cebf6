import { Fragment } from 'preact';
import { CopyButton } from './ui';

/**
 * A titled block of code to copy (a key's first request, an agent's config). A `secret` in it is marked, and kept in
 * one piece where it fits on a line (it moves down whole), broken only where it cannot fit at all (a phone).
 */
export function Snippet({
  title,
  label,
  code,
  secret,
}: {
  title: string;
  label?: string;
  code: string;
  secret?: string;
}) {
  const parts = secret ? code.split(secret) : [code];
  return (
    <>
      <div class="snippet-head">
        <h3 class="snippet-title">{title}</h3>
        <CopyButton text={code} label={`Copy ${title}`} />
      </div>
      <pre class="code code-wrap" tabIndex={0} aria-label={label ?? title}>
        <code>
          {parts.map((part, i) => (
            <Fragment key={i}>
              {i > 0 && <span class="code-secret">{secret}</span>}
              {part}
            </Fragment>
          ))}
        </code>
      </pre>
    </>
  );
}
