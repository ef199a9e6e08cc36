// syncular-gateway-node: a Syncular gateway for Node — mount createGateway(options) into any HTTP server.
export { createGateway, DEFAULTS } from './gateway';
export type { Gateway, GatewayOptions } from './gateway';
export type { Identity } from './auth';
export { ApiError } from './errors';
