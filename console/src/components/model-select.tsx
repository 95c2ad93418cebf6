import { useEffect } from 'preact/hooks';
import type { PricedModel } from '../types';

/* The Playground's model picker, one per tab (each labelled Model, only the chosen tab rendered). */

/** The first of `names` the list has, else its first model. */
export function preferred(models: PricedModel[], names: string[]): string {
  for (const name of names) if (models.some((m) => m.id === name)) return name;
  return models[0]?.id ?? '';
}

/** As the list of models comes (or changes), keeps the model chosen while the list has it, else picks `preferred`. */
export function useModelChoice(
  models: PricedModel[],
  setModel: (update: (current: string) => string) => void,
  names: string[],
): void {
  useEffect(() => {
    // The one chosen kept (read as it is now: a choice made before this ran is not undone), else the preferred.
    setModel((current) => (current && models.some((m) => m.id === current) ? current : preferred(models, names)));
  }, [models]);
}

export function ModelSelect({
  id,
  models,
  value,
  onChange,
  loading,
}: {
  id: string;
  models: PricedModel[];
  value: string;
  onChange: (id: string) => void;
  loading: boolean;
}) {
  return (
    <div class="field">
      <label for={id}>Model</label>
      <select
        id={id}
        value={value}
        onChange={(e) => onChange(e.currentTarget.value)}
        disabled={loading && models.length === 0}
      >
        {models.length === 0 && <option value="">{loading ? 'Loading models…' : 'No models available'}</option>}
        {models.map((m) => (
          <option value={m.id} key={m.id}>
            {m.id}
          </option>
        ))}
      </select>
    </div>
  );
}
