// plotly.js core (scatter and the cartesian axes) with the only other trace types the dashboards draw.
// Tables are drawn as HTML by the page script (dashboards/html.py), so no table trace.
'use strict';
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/bar'), require('plotly.js/lib/heatmap')]);
module.exports = Plotly;
