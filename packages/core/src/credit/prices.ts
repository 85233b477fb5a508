/** Prices, in integer micro-dollars (1 USD = 1,000,000). The one table of prices in the code. */
export const PRICES_MICROS = {
  message: 1_600,
  messageIntroductory: 400,
  attachmentPerMb: 1_200,
  storagePerGbDay: 33_300,
} as const;

export const FREE_MESSAGES = 250;

export const microsToCents = (micros: bigint): number => Number(micros >= 0n ? micros / 10_000n : -((-micros + 9_999n) / 10_000n));

/** "0.0032" for 3,200 micro-dollars. */
export function microsToUsd(micros: bigint): string {
  const neg = micros < 0n;
  const abs = neg ? -micros : micros;
  const whole = abs / 1_000_000n;
  const frac = (abs % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '');
  return `${neg ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`;
}
