// The Prometheus text exposition of /metrics, read into samples.

const LINE = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Samples of `text`: [{name, labels, value}], comments skipped. */
export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = LINE.exec(line);
    if (!match) continue;
    const labels = {};
    for (const [, key, value] of (match[2] ?? "").matchAll(LABEL)) {
      labels[key] = value.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

/** The value of the single sample `name`, or null. */
export function reading(samples, name) {
  const found = samples.find((s) => s.name === name);
  return found ? found.value : null;
}

/** `name`'s samples keyed by their `label`'s value. */
export function byLabel(samples, name, label) {
  const result = {};
  for (const s of samples) if (s.name === name) result[s.labels[label]] = s.value;
  return result;
}
