import type { ComponentChildren, TargetedMouseEvent } from 'preact';
import { useEffect, useState } from 'preact/hooks';

/*
 * Routing on the History API: real paths under /console, no hashes. navigate()
 * pushes (or replaces) a history entry and tells every usePath() and
 * useSearch() hook; the back and forward buttons do the same through popstate.
 * A page that keeps its filters in the query string navigates to itself.
 */

const listeners = new Set<() => void>();

/** The current path without a trailing slash ("/console/keys"). */
export function currentPath(): string {
  const path = location.pathname.replace(/\/+$/, '');
  return path || '/';
}

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (to === location.pathname + location.search && !options.replace) return;
  if (options.replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  for (const listener of listeners) listener();
}

window.addEventListener('popstate', () => {
  for (const listener of listeners) listener();
});

export function usePath(): string {
  const [path, setPath] = useState(currentPath);
  useEffect(() => {
    const update = () => setPath(currentPath());
    listeners.add(update);
    update();
    return () => {
      listeners.delete(update);
    };
  }, []);
  return path;
}

/** The current query string ("?status=failed", or ""), kept as navigate() and the back button change it. */
export function useSearch(): string {
  const [search, setSearch] = useState(() => location.search);
  useEffect(() => {
    const update = () => setSearch(location.search);
    listeners.add(update);
    update();
    return () => {
      listeners.delete(update);
    };
  }, []);
  return search;
}

interface LinkProps {
  href: string;
  class?: string;
  children?: ComponentChildren;
  onClick?: (event: TargetedMouseEvent<HTMLAnchorElement>) => void;
  'aria-current'?: 'page' | undefined;
  'aria-label'?: string;
}

/** An <a> that navigates in place (a modified click still opens a new tab as usual). */
export function Link({ href, onClick, ...rest }: LinkProps) {
  const handle = (event: TargetedMouseEvent<HTMLAnchorElement>) => {
    onClick?.(event);
    if (
      event.defaultPrevented ||
      event.button !== 0 ||
      event.metaKey ||
      event.ctrlKey ||
      event.shiftKey ||
      event.altKey
    )
      return;
    event.preventDefault();
    navigate(href);
  };
  return <a href={href} onClick={handle} {...rest} />;
}
