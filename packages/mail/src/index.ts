/** Mail mechanics: compose and DKIM-sign (nodemailer), parse (mailparser), DSN/ARF reports, SMTP delivery. */
export * from './compose';
export * from './parse';
export * from './deliver';
export * from './reports';
